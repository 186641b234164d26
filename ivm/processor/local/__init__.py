"""Real local services for development, the demo and the tests (DESIGN §6).

No Docker engine runs on the development machines, so the project brings its
services up itself: the Apache Kafka broker (KRaft, from Maven Central via
Maven), Spark in local mode (pyspark, with the Kafka connector jars from Maven
Central) and Prometheus (the Debian package).  Every service binds to loopback
on a free port and keeps its log under ``.local/logs/``.
"""
