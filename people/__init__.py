"""The people-and-access room (issue 31): accounts, memberships and roles, teams, credentials
and key policy, one-time links and consent. It sits between shared/ and its users (serve/,
admin/): it imports only shared/, and none of the processes that handle measurements (ingest,
aggregate, alerts) import it. Nothing here imports Flask; the HTTP side is serve/."""
