"""Install an OpenTelemetry SDK tracer provider when the environment asks for one.

The standard variables decide: `OTEL_TRACES_EXPORTER` (`otlp`, `console`, or several,
comma-separated; `none` or unset: nothing) and, for OTLP, `OTEL_EXPORTER_OTLP_*`
(endpoint, headers) as the exporter reads them itself. `OTEL_SERVICE_NAME` names the
process. The SDK is the optional extra `writegate[otel]`; without it, or with no
exporter configured, nothing is installed and tracing costs one check per step.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

log = logging.getLogger("writegate.tracing")


def exporters_wanted(env: Mapping[str, str]) -> list[str]:
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    return [n for n in names if n and n != "none"]


def configure_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Install a tracer provider with the configured exporters; True if one was."""
    env = os.environ if env is None else env
    wanted = exporters_wanted(env)
    if not wanted:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        log.warning("OTEL_TRACES_EXPORTER is set but writegate[otel] is not installed")
        return False
    service = env.get("OTEL_SERVICE_NAME") or "writegate"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for name in wanted:
        exporter: SpanExporter
        if name == "console":
            exporter = ConsoleSpanExporter()
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError:
                log.warning("the OTLP exporter is not installed: writegate[otel]")
                continue
            exporter = OTLPSpanExporter()
        else:
            log.warning("unknown OTEL_TRACES_EXPORTER %r ignored", name)
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return True
