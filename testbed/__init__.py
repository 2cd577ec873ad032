"""Real servers on loopback for the tests and the benchmarks: PostgreSQL with TimescaleDB,
mosquitto, gunicorn with the API as deployed, the nginx edge and headless Chromium, each started
in a directory of its own on free ports and removed afterwards. Neither tests/ nor bench/ owns
it: both import it, and it imports neither."""
