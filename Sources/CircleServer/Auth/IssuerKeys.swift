import Foundation
import JWTKit
import Logging
import NIOHTTP1

/// One issuer's public keys, by `kid`, as its JWKS last listed them: fetched on first use,
/// refreshed periodically and when a token names a `kid` the set does not have (at most once per
/// ``JWKSSettings/unknownKeyRefreshInterval``). A refresh replaces the set (keys the new document
/// no longer lists stop verifying); a failed refresh keeps the old set and is logged.
///
/// The cache is per issuer: a token's keys are looked up in the set of the issuer its `iss`
/// names, so one issuer's key never verifies another issuer's token.
actor IssuerKeys {
    /// One key, ready to verify with each algorithm it allows.
    struct Entry: Sendable {
        var algorithms: Set<String>
        /// A collection holding only this key with `alg` set, per algorithm.
        var verifiers: [String: JWTKeyCollection]
    }

    let issuer: TokenIssuer
    private let settings: JWKSSettings
    private let http: OutboundHTTP
    private let logger: Logger
    private var keys: [String: Entry] = [:]
    /// When the last fetch started (the unknown-kid refreshes are counted from it).
    private var lastAttempt: ContinuousClock.Instant?
    private var inFlight: Task<Void, Never>?
    /// When the next periodic refresh is due.
    private(set) var nextRefresh: Duration
    /// Fetches that ended, with or without a usable document (for tests and the log).
    private(set) var fetches = 0

    init(issuer: TokenIssuer, settings: JWKSSettings, allowPrivateOutbound: Bool, logger: Logger) {
        self.issuer = issuer
        self.settings = settings
        self.http = OutboundHTTP(
            policy: OutboundAddressPolicy(allowsPrivate: allowPrivateOutbound || issuer.allowsPrivateAddresses),
            timeout: settings.fetchTimeout,
            maxBodyBytes: JWKSDocument.maxBytes
        )
        var logger = logger
        logger[metadataKey: "circle.issuer"] = "\(issuer.issuer)"
        self.logger = logger
        self.nextRefresh = settings.refreshInterval
    }

    /// The key `kid`, refreshing the set first when it does not have it and the last fetch is
    /// long enough ago; `nil` when the issuer does not list it.
    func key(_ kid: String) async -> Entry? {
        if let entry = self.keys[kid] { return entry }
        if let lastAttempt, ContinuousClock.now - lastAttempt < self.settings.unknownKeyRefreshInterval {
            // Wait for a fetch already under way, but do not start one.
            if let inFlight { await inFlight.value }
            return self.keys[kid]
        }
        await self.refresh()
        return self.keys[kid]
    }

    /// Fetches the JWKS now (or waits for the fetch under way).
    func refresh() async {
        if let inFlight {
            await inFlight.value
            return
        }
        self.lastAttempt = ContinuousClock.now
        let task = Task { await self.fetch() }
        self.inFlight = task
        await task.value
        self.inFlight = nil
    }

    /// Refreshes periodically until cancelled.
    func run() async {
        if self.lastAttempt == nil { await self.refresh() }
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: self.nextRefresh)
            } catch {
                return
            }
            await self.refresh()
        }
    }

    private func fetch() async {
        defer { self.fetches += 1 }
        let bytes: [UInt8]
        switch self.issuer.keys.value {
        case .url(let url):
            do throws(OutboundHTTP.Failure) {
                let response = try await self.http.get(url, headers: ["Accept": "application/jwk-set+json, application/json"])
                guard response.status == 200 else {
                    self.logger.error("the JWKS fetch failed; the issuer keeps its keys", metadata: ["circle.jwks": "\(url)", "circle.status": "\(response.status)"])
                    return
                }
                bytes = response.body
                self.nextRefresh = Self.refreshInterval(cacheControl: response.headers["Cache-Control"].first, settings: self.settings)
            } catch {
                self.logger.error("the JWKS fetch failed; the issuer keeps its keys", metadata: ["circle.jwks": "\(url)", "error": "\(error)"])
                return
            }
        case .file(let path):
            do {
                bytes = try Self.readFile(path)
            } catch {
                self.logger.error("cannot read the JWKS file; the issuer keeps its keys", metadata: ["circle.jwks": "\(path)", "error": "\(error)"])
                return
            }
        }
        let document: JWKSDocument
        switch JWKSDocument.parse(bytes) {
        case .success(let value): document = value
        case .failure(let failure):
            self.logger.error("the JWKS was refused; the issuer keeps its keys", metadata: ["circle.jwks": "\(self.issuer.keys)", "error": "\(failure)"])
            return
        }
        for note in document.notes {
            self.logger.warning("a JWKS key was skipped", metadata: ["circle.jwks": "\(self.issuer.keys)", "circle.reason": "\(note)"])
        }
        var keys: [String: Entry] = [:]
        for key in document.keys {
            var verifiers: [String: JWTKeyCollection] = [:]
            for algorithm in key.algorithms {
                var jwk = key.jwk
                jwk.algorithm = JWK.Algorithm(rawValue: algorithm)
                let collection = JWTKeyCollection()
                do {
                    try await collection.add(jwk: jwk)
                    verifiers[algorithm] = collection
                } catch {
                    self.logger.warning("a JWKS key was skipped", metadata: ["circle.kid": "\(key.id)", "error": "\(error)"])
                }
            }
            if !verifiers.isEmpty {
                keys[key.id] = Entry(algorithms: Set(verifiers.keys), verifiers: verifiers)
            }
        }
        let added = Set(keys.keys).subtracting(self.keys.keys)
        let removed = Set(self.keys.keys).subtracting(keys.keys)
        self.keys = keys
        if !added.isEmpty || !removed.isEmpty {
            self.logger.info(
                "the JWKS changed",
                metadata: ["circle.added": "\(added.sorted())", "circle.removed": "\(removed.sorted())", "circle.keys": "\(keys.count)"]
            )
        }
    }

    /// `max-age` from a `Cache-Control` value, bounded by the settings; the default without one.
    static func refreshInterval(cacheControl: String?, settings: JWKSSettings) -> Duration {
        guard let cacheControl else { return settings.refreshInterval }
        for directive in cacheControl.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if parts.count == 2, parts[0].lowercased() == "max-age", let seconds = Int64(parts[1]), seconds >= 0 {
                let asked = Duration.seconds(seconds)
                return min(max(asked, settings.minimumRefreshInterval), settings.refreshInterval)
            }
        }
        return settings.refreshInterval
    }

    private static func readFile(_ path: String) throws -> [UInt8] {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw OutboundHTTP.Failure("cannot open \(path)")
        }
        defer { try? handle.close() }
        let data = try handle.read(upToCount: JWKSDocument.maxBytes + 1) ?? Data()
        return [UInt8](data)
    }
}
