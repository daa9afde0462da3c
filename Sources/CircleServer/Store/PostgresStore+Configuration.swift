import Foundation
import NIOSSL
import PostgresNIO

extension PostgresStore {
    /// Where the database is, from a `postgres://` URL as libpq and most tools write it:
    ///
    ///     postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=MODE&sslrootcert=FILE]
    ///
    /// `postgresql://` is accepted too; user and password may be percent-encoded; the port
    /// defaults to 5432 and the database to the user name. `sslmode` is one of:
    ///
    /// | mode | |
    /// |---|---|
    /// | `disable` | plain TCP |
    /// | `prefer` (default) | TLS when the server offers it, without verifying its certificate |
    /// | `require` | TLS or fail, without verifying the certificate (as libpq's `require`) |
    /// | `verify-full` | TLS, the certificate verified against the system's roots (or `sslrootcert`) and the host name |
    public struct Configuration: Sendable, Hashable {
        public enum TLSMode: String, Sendable, Hashable, CaseIterable {
            case disable
            case prefer
            case require
            case verifyFull = "verify-full"
        }

        public var host: String
        public var port: Int
        public var user: String
        public var password: String?
        public var database: String
        public var tlsMode: TLSMode
        /// PEM file of the certificate authority for `verify-full`.
        public var rootCertificatePath: String?

        public init(
            host: String,
            port: Int = 5432,
            user: String,
            password: String?,
            database: String,
            tlsMode: TLSMode = .prefer,
            rootCertificatePath: String? = nil
        ) {
            self.host = host
            self.port = port
            self.user = user
            self.password = password
            self.database = database
            self.tlsMode = tlsMode
            self.rootCertificatePath = rootCertificatePath
        }

        /// Parses a `postgres://` URL; the error says what is wrong without echoing the password.
        public init(url: String) throws(ConfigurationError) {
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased() else {
                throw ConfigurationError("not a URL: give postgres://USER:PASSWORD@HOST:PORT/DATABASE")
            }
            guard scheme == "postgres" || scheme == "postgresql" else {
                throw ConfigurationError("the URL's scheme is \(scheme); give postgres://USER:PASSWORD@HOST:PORT/DATABASE")
            }
            guard let host = components.host, !host.isEmpty else {
                throw ConfigurationError("the URL names no host: give postgres://USER:PASSWORD@HOST:PORT/DATABASE")
            }
            guard let user = components.user, !user.isEmpty else {
                throw ConfigurationError("the URL names no user: give postgres://USER:PASSWORD@HOST:PORT/DATABASE")
            }
            let port = components.port ?? 5432
            guard (1...65535).contains(port) else {
                throw ConfigurationError("the URL's port \(port) is not between 1 and 65535")
            }
            let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
            var tlsMode = TLSMode.prefer
            var rootCertificatePath: String?
            for item in components.queryItems ?? [] {
                switch item.name {
                case "sslmode":
                    guard let value = item.value, let mode = TLSMode(rawValue: value) else {
                        throw ConfigurationError(
                            "sslmode=\(item.value ?? "") is not one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))"
                        )
                    }
                    tlsMode = mode
                case "sslrootcert":
                    rootCertificatePath = item.value
                default:
                    throw ConfigurationError("the URL's parameter \(item.name) is not supported (sslmode and sslrootcert are)")
                }
            }
            self.init(
                host: host,
                port: port,
                user: user.removingPercentEncoding ?? user,
                password: components.password.map { $0.removingPercentEncoding ?? $0 },
                database: path.isEmpty ? user : (path.removingPercentEncoding ?? path),
                tlsMode: tlsMode,
                rootCertificatePath: rootCertificatePath
            )
        }

        /// The URL without its password, for logs.
        public var redacted: String {
            "postgres://\(self.user)\(self.password == nil ? "" : ":***")@\(self.host):\(self.port)/\(self.database)?sslmode=\(self.tlsMode.rawValue)"
        }

        /// The TLS settings of `tlsMode`, nil for `disable`.
        private func tlsConfiguration() -> TLSConfiguration? {
            var configuration = TLSConfiguration.makeClientConfiguration()
            switch self.tlsMode {
            case .disable:
                return nil
            case .prefer, .require:
                configuration.certificateVerification = .none
            case .verifyFull:
                configuration.certificateVerification = .fullVerification
                if let path = self.rootCertificatePath { configuration.trustRoots = .file(path) }
            }
            return configuration
        }

        func clientTLS() -> PostgresClient.Configuration.TLS {
            guard let tls = self.tlsConfiguration() else { return .disable }
            return self.tlsMode == .prefer ? .prefer(tls) : .require(tls)
        }

        /// The same choice for a single connection.
        func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
            guard let tls = self.tlsConfiguration() else { return .disable }
            let context = try NIOSSLContext(configuration: tls)
            return self.tlsMode == .prefer ? .prefer(context) : .require(context)
        }
    }

    /// A `postgres://` URL that cannot be used, with the reason.
    public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
        public var message: String
        init(_ message: String) { self.message = message }
        public var description: String { self.message }
    }
}
