"""The core: what every package may import — defaults, Redis keys, errors, URLs, the
embedded Redis server, waiting out an outage, signals, telemetry and progress lines."""
