"""Orchestration: starts, runs and ends sessions by joining the core and the adapters."""
