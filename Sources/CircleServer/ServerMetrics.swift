import CoreMetrics
import Prometheus

/// The server's metrics, recorded through swift-metrics into a Prometheus registry of its own
/// (no global bootstrap, so several servers can live in one test process); `GET /metrics`
/// renders the registry as Prometheus text.
final class ServerMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory

    let connections: CoreMetrics.Meter
    let connectionsOpened: CoreMetrics.Counter
    let joins: CoreMetrics.Counter
    let posts: CoreMetrics.Counter
    let duplicatePosts: CoreMetrics.Counter
    let deliveries: CoreMetrics.Counter
    let commitLatency: CoreMetrics.Timer
    let fanoutLatency: CoreMetrics.Timer
    let commitBatchSize: CoreMetrics.Recorder
    let mediaBytesReceived: CoreMetrics.Counter
    let mediaBytesSent: CoreMetrics.Counter
    let mediaStored: CoreMetrics.Counter

    init() {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        let latencyBuckets: [Duration] = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2),
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
            .milliseconds(250), .milliseconds(500), .seconds(1),
        ]
        factory.defaultDurationHistogramBuckets = latencyBuckets
        factory.defaultValueHistogramBuckets = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        self.registry = registry
        self.factory = factory
        self.connections = CoreMetrics.Meter(label: "circle_connections", factory: factory)
        self.connectionsOpened = CoreMetrics.Counter(label: "circle_connections_opened_total", factory: factory)
        self.joins = CoreMetrics.Counter(label: "circle_joins_total", factory: factory)
        self.posts = CoreMetrics.Counter(label: "circle_posts_total", factory: factory)
        self.duplicatePosts = CoreMetrics.Counter(label: "circle_duplicate_posts_total", factory: factory)
        self.deliveries = CoreMetrics.Counter(label: "circle_deliveries_total", factory: factory)
        self.commitLatency = CoreMetrics.Timer(label: "circle_commit_seconds", factory: factory)
        self.fanoutLatency = CoreMetrics.Timer(label: "circle_fanout_seconds", factory: factory)
        self.commitBatchSize = CoreMetrics.Recorder(label: "circle_commit_batch_size", factory: factory)
        self.mediaBytesReceived = CoreMetrics.Counter(label: "circle_media_received_bytes_total", factory: factory)
        self.mediaBytesSent = CoreMetrics.Counter(label: "circle_media_sent_bytes_total", factory: factory)
        self.mediaStored = CoreMetrics.Counter(label: "circle_media_uploads_completed_total", factory: factory)
    }

    /// Counts an error reply or refusal by its code.
    func error(_ code: String) {
        CoreMetrics.Counter(label: "circle_errors_total", dimensions: [("code", code)], factory: self.factory).increment()
    }

    /// Counts a limit that was reached (a connection refused or closed, a request refused), by
    /// the limit's name; docs/API.md lists the names.
    func limitHit(_ limit: String) {
        CoreMetrics.Counter(label: "circle_limit_hits_total", dimensions: [("limit", limit)], factory: self.factory).increment()
    }

    /// Counts an HTTP request by route and status.
    func httpRequest(route: String, status: UInt) {
        CoreMetrics.Counter(label: "circle_http_requests_total", dimensions: [("route", route), ("status", "\(status)")], factory: self.factory)
            .increment()
    }

    func render() -> [UInt8] {
        self.registry.emitToBuffer()
    }
}
