FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 NVKE_DATA_DIR=/var/lib/nvke
WORKDIR /app
COPY pyproject.toml README.md ./
COPY nvke ./nvke
COPY clusters ./clusters
COPY nodepools ./nodepools
COPY frontend ./frontend
COPY manage.py ./
RUN pip install . && mkdir -p /var/lib/nvke && python manage.py collectstatic --noinput -v0 \
    && useradd --system --home /var/lib/nvke nvke && chown -R nvke /var/lib/nvke
USER nvke
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "nvke.asgi:application"]
