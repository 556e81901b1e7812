"""The projection contract: every projection of every service, installed or not, proves the
same properties against real NATS and Postgres (see test_contract.py)."""
