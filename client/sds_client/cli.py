"""`sds-client`: export a listing of /data to CSV or Parquet, and list tables.

Credentials and address come from the environment (SDS_URL; SDS_APIKEY, SDS_TOKEN, or
SDS_EMAIL with SDS_PASSWORD), never from the command line, where `ps` and shell history
would show them.

    sds-client export hourly --device A000101 --start-time 2024-07-01 --format parquet -o h.parquet
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from sds_client._http import ApiError
from sds_client.client import UNIT_PARAMS, Client


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sds-client", description=__doc__.split("\n\n")[0],
        epilog="Credentials: SDS_URL and SDS_APIKEY (or SDS_TOKEN, or SDS_EMAIL + SDS_PASSWORD).")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tables", help="List the data tables.")
    exp = sub.add_parser("export", help="Write every row of a listing to a file.")
    exp.add_argument("table")
    exp.add_argument("--device", action="append",
                     help="Device name; repeat (or A,B) for several devices")
    exp.add_argument("--location", help="Location id or name")
    exp.add_argument("--select", help="Comma-separated columns")
    exp.add_argument("--start-time", help="Inclusive start (ISO 8601)")
    exp.add_argument("--end-time", help="Inclusive end (ISO 8601)")
    exp.add_argument("--order", choices=["asc", "desc"])
    exp.add_argument("--local-time", help="Zone or offset for a local_time column")
    exp.add_argument("--updated-since", help="Only rows recomputed after this instant")
    for param in UNIT_PARAMS:
        exp.add_argument(f"--{param}", help=f"{param} unit code")
    exp.add_argument("--format", choices=["csv", "parquet"], default="csv")
    exp.add_argument("-o", "--output", type=Path, required=True,
                     help="Output file ('-' for standard output, CSV only)")
    exp.add_argument("--no-progress", action="store_true", help="No progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `sds-client`; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        client = Client.from_env()
    except ValueError as exc:
        print(f"sds-client: {exc}", file=sys.stderr)
        return 2
    try:
        with client:
            if args.command == "tables":
                print("\n".join(client.tables()))
                return 0
            return _export(client, args)
    except ApiError as exc:
        print(f"sds-client: the API answered {exc.status}: {exc.message}", file=sys.stderr)
        return 1


def _export(client: Client, args: argparse.Namespace) -> int:
    params = {
        "device": args.device, "location": args.location, "select": args.select,
        "start_time": args.start_time, "end_time": args.end_time, "order": args.order,
        "local_time": args.local_time, "updated_since": args.updated_since,
        **{p: getattr(args, p) for p in UNIT_PARAMS},
    }
    params = {k: v for k, v in params.items() if v is not None}
    progress = False if args.no_progress else None
    if args.format == "csv":
        if str(args.output) == "-":
            count = client.export_csv(args.table, sys.stdout.buffer, progress=progress, **params)
        else:
            with args.output.open("wb") as out:
                count = client.export_csv(args.table, out, progress=progress, **params)
    else:
        if str(args.output) == "-":
            print("sds-client: parquet needs a file (-o FILE)", file=sys.stderr)
            return 2
        frame = client.to_pandas(args.table, progress=progress, **params)
        frame.to_parquet(args.output)
        count = len(frame)
    print(f"{count} rows of {args.table} written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
