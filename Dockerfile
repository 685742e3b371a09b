# srcrawl: one image for the master, the slaves and the synthetic test web.
FROM python:3.11-slim
WORKDIR /app
RUN useradd --create-home srcrawl
# The dependencies first, in a layer of their own: a change to srcrawl's code
# rebuilds only the layers below.
COPY pyproject.toml ./
RUN python -c "import subprocess, sys, tomllib; \
deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
subprocess.check_call([sys.executable, '-m', 'pip', 'install', '--no-cache-dir', *deps])"
COPY README.md ./
COPY srcrawl ./srcrawl
COPY master ./master
COPY slave ./slave
COPY queues ./queues
COPY pagerank ./pagerank
COPY indexer ./indexer
COPY sql ./sql
COPY benchmarks ./benchmarks
COPY portal ./portal
RUN pip install --no-cache-dir --no-deps .
USER srcrawl
WORKDIR /home/srcrawl
ENTRYPOINT ["srcrawl"]
CMD ["status"]
