"""Cost of the database roles and row-level security (see __main__)."""
