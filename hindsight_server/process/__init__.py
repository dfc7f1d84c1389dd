"""The process start: the composition root that builds one memory server (or the offline commands' parts)
from the Settings, and its telemetry wiring. The only code that knows every layer below it."""
