# srcrawl: one image for the master, the slaves and the synthetic test web.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY srcrawl ./srcrawl
COPY master ./master
COPY slave ./slave
COPY queues ./queues
COPY pagerank ./pagerank
COPY indexer ./indexer
COPY sql ./sql
COPY benchmarks ./benchmarks
COPY portal ./portal
RUN pip install --no-cache-dir . && useradd --create-home srcrawl
# The WARC volume's mount point, owned by the service user: Docker gives a new named
# volume the owner and mode of the directory it is mounted on.
RUN install -d -o srcrawl -g srcrawl /warc
USER srcrawl
WORKDIR /home/srcrawl
ENTRYPOINT ["srcrawl"]
CMD ["status"]
