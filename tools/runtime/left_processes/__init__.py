"""The process groups dead holders left running (an expired claim's command, a lost async run or
launch), killed by a worker of their host (docs/subsystems/claims_and_recovery.md, "Orphan
process groups"). The rows are ``tools.models.LeftProcess``."""
