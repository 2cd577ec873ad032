"""`python -m alerts.delivery`: run the deliverer until SIGTERM or SIGINT."""

from alerts.delivery.service import main

if __name__ == "__main__":
    main()
