"""Schedulers: turn an evaluation and a state snapshot into a plan (generic for service and
batch jobs, system for system and sysbatch). Pure code; `await` only yields between chunks."""
