"""What the memory server tells about itself: spans and latencies of its stages (`recorder`, the only
module the pipelines import), the figures `hindsight status` shows (`status`), and the OpenTelemetry
metrics exported from both. Imports OpenTelemetry's API and the standard library only; the SDK is
installed by the process's entry point (`hindsight.telemetry.install`)."""
