"""`python -m admin` is `sds`."""

from admin.cli import main

main()
