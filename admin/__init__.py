"""The operator room: the `sds` command line (admin/cli.py) and the account and broker
administration behind it. Not library code: it may import every package of the service, and none
of them imports it."""
