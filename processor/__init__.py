"""The streaming runtime: Kafka I/O, Avro codecs, the Spark job and the `ivm` command line.

``processor`` imports ``ivm``; ``ivm`` never imports ``processor``.
"""
