import NIOConcurrencyHelpers

/// The server's configuration as it is now. ``CircleServer/reload(_:)`` replaces it, after
/// checking the new one; whatever reads it at use time follows: each connection as it opens (its
/// limits and timeouts), each HTTP write (the per-author rate), each webhook delivery (timeout,
/// retries) and publish hook answer (the post size). What was copied at start does not
/// (docs/OPERATIONS.md, "Reloading on SIGHUP", lists which settings are which).
final class LiveConfiguration: Sendable {
    private let box: NIOLockedValueBox<CircleServerConfiguration>

    init(_ configuration: CircleServerConfiguration) {
        self.box = NIOLockedValueBox(configuration)
    }

    var current: CircleServerConfiguration { self.box.withLockedValue { $0 } }

    /// Applies `change` to a copy, checks it (``CircleServerConfiguration/validate()``), and
    /// replaces the configuration with it; when it is invalid the configuration stays as it was.
    func reload(_ change: (inout CircleServerConfiguration) -> Void) throws {
        try self.box.withLockedValue { configuration in
            var changed = configuration
            change(&changed)
            try changed.validate()
            configuration = changed
        }
    }
}
