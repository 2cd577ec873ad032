"""`python -m alerts.evaluator`: run the alert evaluator until SIGTERM or SIGINT."""

from alerts.evaluator.service import main

if __name__ == "__main__":
    main()
