# The image installs NVKE as the wheel pyproject.toml describes: whatever packages its
# [tool.setuptools.packages.find] finds go in, so a new app cannot be left out by a COPY list.
# tests/test_image.py builds the same wheel from the same context, without Docker, and runs collectstatic
# and check --deploy on a clean install of it.
FROM python:3.11-slim AS build
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 NVKE_DATA_DIR=/var/lib/nvke
WORKDIR /app
COPY --from=build /wheels /wheels
COPY manage.py ./
RUN pip install /wheels/*.whl && rm -rf /wheels && mkdir -p /var/lib/nvke \
    && python manage.py collectstatic --noinput -v0 \
    && useradd --system --home /var/lib/nvke nvke && chown -R nvke /var/lib/nvke
USER nvke
EXPOSE 8000
CMD ["uvicorn", "--host", "0.0.0.0", "--port", "8000", "--no-proxy-headers", "nvke.asgi:application"]
