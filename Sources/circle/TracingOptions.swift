import ArgumentParser
import CircleServer
import Foundation
import Logging
import OTel
import ServiceLifecycle
import Tracing

/// `circle serve`'s tracing (docs/OPERATIONS.md, "Tracing"): off unless an OTLP endpoint is given.
struct TracingOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Turns tracing on: the OpenTelemetry collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318 (spans go to its /v1/traces).",
            valueName: "url"
        )
    )
    var otlpEndpoint: String?

    @Option(help: "The share of traces recorded, 0 to 1 (a request that arrives with a sampled trace is always recorded).")
    var traceRatio: Double = 1

    func validate() throws {
        if let endpoint = self.otlpEndpoint {
            guard let components = URLComponents(string: endpoint), ["http", "https"].contains(components.scheme?.lowercased() ?? ""),
                components.host?.isEmpty == false, components.query == nil
            else {
                throw ValidationError("--otlp-endpoint is an http:// or https:// URL such as http://127.0.0.1:4318, not \"\(endpoint)\"")
            }
        }
        guard (0...1).contains(self.traceRatio) else {
            throw ValidationError("--trace-ratio is from 0 to 1, not \(self.traceRatio)")
        }
    }

    /// swift-otel's tracer and the service that exports its spans, bootstrapped as the process's
    /// tracer (Hummingbird's `TracingMiddleware` reads it there); `nil` when tracing is off.
    /// Only traces: the logs and metrics have their own ways out (the log, `/metrics`).
    func bootstrap(logger: Logger) throws -> (tracer: any Tracer, service: any Service)? {
        guard let endpoint = self.otlpEndpoint else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "circle"
        configuration.resourceAttributes["service.version"] = CircleVersion.current
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.diagnosticLogger = .custom(logger)
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        configuration.traces.otlpExporter.endpoint = (endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint) + "/v1/traces"
        if let sampler = OTel.Configuration.TracesConfiguration.SamplerConfiguration.parentBasedTraceIDRatio(ratio: self.traceRatio) {
            configuration.traces.sampler = sampler
        }
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(backend.factory)
        return (backend.factory, backend.service)
    }

    /// What the log lines carry while a span is current: its trace and span ids.
    static let logMetadata = OTel.makeLoggingMetadataProvider()
}
