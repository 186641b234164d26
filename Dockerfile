# The processor image for docker-compose: Python 3.11, a Java runtime for Spark,
# the project with its compiled kernels (a C compiler at build time), and the Spark
# Kafka connector jars fetched with Maven at build time.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml setup.py README.md LICENSE NOTICE MANIFEST.in ./
COPY ivm ./ivm
COPY schemas ./schemas
COPY config ./config
COPY data ./data
COPY monitoring ./monitoring
RUN pip install --no-cache-dir '.[processor]' \
 && IVM_CACHE=/opt/ivm-cache ivm local fetch

# no SPARK_LOCAL_IP: the processor pins Spark to the loopback address for local masters itself,
# and a cluster master needs the container's reachable address.  The installed package reads its schemas,
# sample data and example configuration from its package data (ivm/resources: IVM_SCHEMAS and IVM_DATA
# override them); /app/config and /app/data stay for the commands below and docker-compose.yml's example.
ENV IVM_CACHE=/opt/ivm-cache
EXPOSE 9108
ENTRYPOINT ["ivm"]
CMD ["run", "--config", "/app/config/demo.toml", "--bootstrap", "kafka:9092", "--metrics-port", "9108", "--metrics-address", "0.0.0.0"]
