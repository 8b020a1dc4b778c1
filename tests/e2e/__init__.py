"""The end-to-end tests: a package, so their conftest imports as e2e.conftest and never takes the name
`conftest` from tests/unit/conftest.py, whose helpers the unit tests import by that name."""
