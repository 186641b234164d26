"""Kafka I/O: every client configured from one place (:mod:`.clients`), topics (:mod:`.topics`), the outputs'
producer (:mod:`.sink`), loading files into relation topics (:mod:`.produce`), reading a pipeline's topics
(:mod:`.subscribe`) and its dead-letter topic (:mod:`.deadletters`)."""
