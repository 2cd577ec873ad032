"""Python client of the environmental sensor data service's HTTP API (`/api/v2`).

    from sds_client import Client
    api = Client("http://127.0.0.1:8080", apikey="sdsk_...")
    df = api.to_pandas("hourly", device="A000101", start_time="2024-07-01",
                       local_time="America/Chicago", temp="f")

Needs only requests and tqdm; pandas (`to_pandas`) and pyarrow (parquet export) are extras.
Documentation: docs/client.md of the service's repository.
"""

from sds_client._http import ApiError, Credentials, retry_after_seconds
from sds_client.client import Client, Listing, Sync, data_params, parse_units

__all__ = ["ApiError", "Client", "Credentials", "Listing", "Sync", "data_params",
           "parse_units", "retry_after_seconds"]
