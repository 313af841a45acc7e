"""The host tool port: external hosts claim the calls of the tools they serve, report their
progress and settle them (docs/subsystems/host_tools.md)."""
