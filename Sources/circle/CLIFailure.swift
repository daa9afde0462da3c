import ArgumentParser
import CircleClient
import CircleServer
import CircleSocket
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// The exit statuses every command uses (docs/CLI.md, "Exit status"). The one place that maps a
/// failure to its status and its sentence is ``CLIFailure``.
enum ExitStatus {
    /// Done.
    static let success: Int32 = 0
    /// The server refused what was asked, or it did not finish in time.
    static let refused: Int32 = 1
    /// The server could not be reached.
    static let unreachable: Int32 = 2
    /// An open connection was lost (`circle ws`; the SDK commands reconnect instead).
    static let connectionLost: Int32 = 3
    /// The token was refused, or no token could be had.
    static let unauthorized: Int32 = 4
    /// A local problem: a file that cannot be read or written, a port in use.
    static let local: Int32 = 5
    /// `circle serve`: another process serves the data directory (it holds its lock).
    static let dataDirectoryInUse: Int32 = 6
    /// `circle restore`: the backup does not match its manifest, or its database is damaged.
    static let damaged: Int32 = 7
    /// The command line is wrong.
    static let usage: Int32 = 64
    /// Interrupted twice with Ctrl-C.
    static let interrupted: Int32 = 130
}

/// A failure as a person reads it: what happened and what to do, in one sentence; the
/// technical details for `--verbose`; and the exit status.
struct CLIFailure: Error, CustomStringConvertible {
    enum Kind: Sendable {
        case refused, unreachable, connectionLost, unauthorized, local, dataDirectoryInUse, damaged, usage

        var exitCode: Int32 {
            switch self {
            case .refused: ExitStatus.refused
            case .unreachable: ExitStatus.unreachable
            case .connectionLost: ExitStatus.connectionLost
            case .unauthorized: ExitStatus.unauthorized
            case .local: ExitStatus.local
            case .dataDirectoryInUse: ExitStatus.dataDirectoryInUse
            case .damaged: ExitStatus.damaged
            case .usage: ExitStatus.usage
            }
        }
    }

    var kind: Kind
    var message: String
    /// The error behind the sentence, shown with `--verbose`.
    var detail: String?

    var exitCode: Int32 { self.kind.exitCode }
    var description: String { self.message }

    init(_ kind: Kind, _ message: String, detail: String? = nil) {
        self.kind = kind
        self.message = message
        self.detail = detail
    }
}

/// What a command was doing when it failed, so the sentence can name it.
struct FailureContext: Sendable {
    /// The WebSocket URL of the server.
    var server: String
    var user: String?
    var circle: String?

    /// `host:port` of the server URL, for sentences.
    var address: String {
        (try? HTTPTarget.parse(self.server))?.target.address ?? self.server
    }

    /// How the user name shows in suggested commands.
    var userArgument: String { self.user.map { "--user \($0)" } ?? "--user NAME" }
}

extension CLIFailure {
    /// The failure for any error a command can meet. Every sentence of the CLI's failures is
    /// made here.
    static func from(_ error: any Error, _ context: FailureContext) -> CLIFailure {
        switch error {
        case let failure as CLIFailure:
            return failure
        case let error as WebSocketError:
            return self.from(error, context)
        case let error as CircleClientError:
            return self.from(error, context)
        case is WSCommand.ConnectDeadlineExceeded:
            return CLIFailure(
                .unreachable,
                "no answer from \(context.address) in time — is the host name right and the server running? (--timeout sets how long to wait)"
            )
        case let error as IOError:
            return CLIFailure(.local, "\(error.description)", detail: "\(error)")
        default:
            return CLIFailure(.refused, "\(error)", detail: String(reflecting: error))
        }
    }

    /// A failed connect or upgrade.
    static func from(_ error: WebSocketError, _ context: FailureContext) -> CLIFailure {
        let detail = error.description + (error.httpBody.map { "; body: \($0)" } ?? "")
        switch error.code {
        case .invalidURL:
            return CLIFailure(.usage, "\(context.server) is not a WebSocket URL; give --server ws://HOST:PORT/v1/ws", detail: detail)
        case .connectTimeout:
            return CLIFailure(
                .unreachable,
                "no answer from \(context.address) in time — is the address right and the server running? (--timeout sets how long to wait)",
                detail: detail
            )
        case .tlsFailed, .pinMismatch:
            return CLIFailure(
                .unreachable,
                "the TLS handshake with \(context.address) failed — its certificate is not trusted here (\(error.message))",
                detail: detail
            )
        case .handshakeRefused:
            return self.refusedUpgrade(status: error.httpStatus ?? 0, body: error.httpBody ?? "", detail: detail, context)
        case .connectionFailed:
            if Self.isConnectionRefused(error) {
                return CLIFailure(
                    .unreachable,
                    "nothing is listening on \(context.address) (connection refused) — is `circle serve` running there? Start it, or point --server at it",
                    detail: detail
                )
            }
            if error.underlying is SocketAddressError || detail.contains("UnknownHost") {
                let host = (try? HTTPTarget.parse(context.server))?.target.host ?? context.server
                return CLIFailure(.unreachable, "cannot find the host \"\(host)\" (the name does not resolve) — check --server", detail: detail)
            }
            return CLIFailure(
                .unreachable,
                "cannot reach \(context.address) (\(error.message)) — is `circle serve` running there? Start it, or point --server at it",
                detail: detail
            )
        default:
            return CLIFailure(.unreachable, "the connection to \(context.address) failed: \(error.message)", detail: detail)
        }
    }

    /// A refused WebSocket upgrade or HTTP request, by its status.
    static func refusedUpgrade(status: Int, body: String, detail: String, _ context: FailureContext) -> CLIFailure {
        self.refusedUpgrade(status: status, reason: Self.serverMessage(body), detail: detail, context)
    }

    /// A refused WebSocket upgrade or HTTP request, by its status, with the server's `message`.
    static func refusedUpgrade(status: Int, reason: String?, detail: String, _ context: FailureContext) -> CLIFailure {
        switch status {
        case 401:
            return CLIFailure(
                .unauthorized,
                "the server refused the token\(reason.map { " (\($0))" } ?? "") — mint a fresh one with `circle token \(context.userArgument)`, or check that --data or --jwt-secret is the server's",
                detail: detail
            )
        case 403:
            return CLIFailure(.refused, "the server refused the request\(reason.map { ": \($0)" } ?? "")", detail: detail)
        case 404:
            return CLIFailure(
                .unreachable,
                "\(context.address) answers, but has no Circle endpoint at \(context.server) (HTTP 404) — the usual URL is ws://HOST:PORT/v1/ws",
                detail: detail
            )
        case 429:
            return CLIFailure(.refused, "the server refused another connection\(reason.map { ": \($0)" } ?? "") — close some, or wait", detail: detail)
        case 500...599:
            return CLIFailure(.unreachable, "the server at \(context.address) failed (HTTP \(status))\(reason.map { ": \($0)" } ?? "")", detail: detail)
        default:
            return CLIFailure(.refused, "the server refused the connection (HTTP \(status))\(reason.map { ": \($0)" } ?? "")", detail: detail)
        }
    }

    /// A call of the SDK that failed.
    static func from(_ error: CircleClientError, _ context: FailureContext) -> CLIFailure {
        let detail = "\(error.code): \(error.message)"
        if error.httpStatus == 401 || error.code == .server(.accountDisabled) {
            return CLIFailure(.unauthorized, "the server refused the credentials: \(error.message)", detail: detail)
        }
        switch error.code {
        case .notConnected:
            return CLIFailure(.unreachable, "lost the connection to \(context.address) and could not get it back in time", detail: detail)
        case .timedOut:
            return CLIFailure(.refused, "the server did not answer in time (--timeout sets how long to wait)", detail: detail)
        case .notFound:
            if context.circle != nil, error.message.contains("circle") {
                return self.noSuchCircle(context, detail: detail)
            }
            return CLIFailure(.refused, "not found: \(error.message)", detail: detail)
        case .forbidden:
            if let circle = context.circle, error.message.contains("private") {
                return self.notAMember(circle, context, detail: detail)
            }
            return CLIFailure(.refused, "the server refused: \(error.message)", detail: detail)
        case .server(.unsupportedMediaType):
            return CLIFailure(.refused, "the server does not take this file: only JPEG, PNG, GIF and WebP photos (\(error.message))", detail: detail)
        case .tooLarge:
            return CLIFailure(.refused, "too large: \(error.message)", detail: detail)
        case .rateLimited:
            return CLIFailure(.refused, "the server asks to slow down: \(error.message)", detail: detail)
        case .fileError:
            return CLIFailure(.local, error.message, detail: detail)
        case .tlsFailed:
            return CLIFailure(.unreachable, "the TLS handshake with \(context.address) failed: \(error.message)", detail: detail)
        case .stopped:
            return CLIFailure(.refused, "the session ended: \(error.message)", detail: detail)
        case .httpError:
            if error.message.contains("401") {
                return self.refusedUpgrade(status: 401, body: "", detail: detail, context)
            }
            if error.message.contains("415") {
                return CLIFailure(.refused, "the server does not take this file: only JPEG, PNG, GIF and WebP photos", detail: detail)
            }
            return CLIFailure(.refused, "the server refused the transfer: \(error.message)", detail: detail)
        default:
            return CLIFailure(.refused, "the server refused: \(error.message)", detail: detail)
        }
    }

    /// Why `circle serve` could not open its listening socket, and what to do.
    static func listenFailure(_ error: IOError, host: String, port: Int) -> CLIFailure {
        let detail = "\(error)"
        switch error.errnoCode {
        case EADDRINUSE:
            return CLIFailure(.local, "port \(port) is in use — is another circle serve running? Stop it, or use --port", detail: detail)
        case EACCES:
            return CLIFailure(.local, "may not listen on port \(port) (ports below 1024 need privileges) — use --port 8080 or higher", detail: detail)
        case EADDRNOTAVAIL:
            return CLIFailure(.local, "\(host) is not an address of this machine — use --host 127.0.0.1, or 0.0.0.0 for every network", detail: detail)
        default:
            return CLIFailure(.local, "cannot listen on \(host):\(port): \(error.description)", detail: detail)
        }
    }

    /// Why `circle serve` cannot use its `--data` directory: the path, what is wrong with it and
    /// what to do; another server that holds the directory by its PID and command line.
    static func dataDirectory(_ error: DataDirectoryError) -> CLIFailure {
        let data = error.path
        let detail = "\(error.code)\(error.errno.map { " (errno \($0): \(error.reason))" } ?? "") at \(error.culprit)"
        switch error.code {
        case .inUse:
            return CLIFailure(
                .dataDirectoryInUse,
                "the data directory \(data) is in use by \(error.holder?.description ?? "another process") — two servers on one SQLite store would not see each other's posts live; stop that one first, or give this one another --data",
                detail: detail
            )
        case .parentMissing:
            return CLIFailure(
                .local,
                "cannot create the data directory \(data): its parent \(error.culprit) does not exist — create it first (mkdir -p \(error.culprit)), or check --data for a typo",
                detail: detail
            )
        case .notADirectory where error.culprit == data:
            return CLIFailure(.local, "--data \(data) is a file, not a directory — give --data the path of a directory (it is created if missing)", detail: detail)
        case .notADirectory:
            return CLIFailure(.local, "cannot use --data \(data): \(error.culprit) is a file, not a directory — check the path", detail: detail)
        case .notWritable:
            return CLIFailure(
                .local,
                "no permission to write in \(error.culprit) (for --data \(data)) — run circle serve as a user who may, or give --data a directory this user owns",
                detail: detail
            )
        case .readOnly:
            return CLIFailure(.local, "--data \(data) is on a read-only file system — give --data a directory on a writable one", detail: detail)
        default:
            if data.isEmpty { return CLIFailure(.usage, "--data is empty — give the path of a directory") }
            return CLIFailure(.local, "cannot use --data \(data): \(error.culprit): \(error.reason)", detail: detail)
        }
    }

    /// Why the SDK's session ended, as a phrase.
    static func describe(_ reason: StopReason) -> String {
        switch reason {
        case .requested: "closed"
        case .serverClosed: "the server ended the session"
        case .unauthorized(let message): "the server refused the token (\(Self.serverMessage(message) ?? message))"
        case .rejected(let code, let why): "the server refused the connection (\(code)\(why.isEmpty ? "" : ": \(Self.serverMessage(why) ?? why)"))"
        case .gaveUp(let attempts): "gave up after \(attempts) attempts to connect"
        }
    }

    static func noSuchCircle(_ context: FailureContext, detail: String? = nil) -> CLIFailure {
        let circle = context.circle ?? "NAME"
        return CLIFailure(
            .refused,
            "there is no circle \"\(circle)\" on \(context.address) — create it with `circle circle create \(circle) \(context.userArgument)`, or see `circle circle list`",
            detail: detail
        )
    }

    static func notAMember(_ circle: String, _ context: FailureContext, detail: String? = nil) -> CLIFailure {
        CLIFailure(
            .refused,
            "\"\(circle)\" is private and \(context.user ?? "you") \(context.user == nil ? "are" : "is") not a member — its owner can add you with `circle circle add-member \(circle) \(context.user ?? "NAME")`",
            detail: detail
        )
    }

    /// The `message` of a JSON error body (`{"error":{"message":…}}`), if it has one.
    static func serverMessage(_ body: String) -> String? {
        HTTPAPI.decode(HTTPAPI.ErrorBody.self, from: Array(body.utf8))?.error.message
    }

    /// Whether the connect failed with ECONNREFUSED (nothing listening).
    private static func isConnectionRefused(_ error: WebSocketError) -> Bool {
        func refused(_ error: (any Error)?) -> Bool {
            switch error {
            case let io as IOError: return io.errnoCode == ECONNREFUSED
            case let multiple as NIOConnectionError: return multiple.connectionErrors.contains { refused($0.error) }
            default: return false
            }
        }
        if refused(error.underlying) { return true }
        let text = "\(error)"
        return text.contains("errno: \(ECONNREFUSED))") || text.contains("Connection refused")
    }
}

extension CLIFailure {
    /// Why `circle ws URL` could not connect, with the HTTP status and body of a refused upgrade.
    static func webSocketConnect(_ error: any Error, url: String, connectTimeout: Double) -> CLIFailure {
        let prefix = "cannot connect to \(url)"
        if error is WSCommand.ConnectDeadlineExceeded {
            return CLIFailure(.unreachable, "\(prefix): no connection within \(WSCommand.formatSeconds(connectTimeout)) (is the host name right?)")
        }
        guard let error = error as? WebSocketError else {
            return CLIFailure(.unreachable, "\(prefix): \(error)")
        }
        let message: String
        switch error.code {
        case .invalidURL:
            return CLIFailure(.usage, "invalid URL: \(error.message)")
        case .connectTimeout:
            message = "\(prefix): timed out after \(WSCommand.formatSeconds(connectTimeout))"
        case .connectionFailed:
            message = "\(prefix): \(error.underlying.flatMap(Self.reason(for:)) ?? error.message)"
        case .tlsFailed:
            let host = (try? HTTPTarget.parse(url))?.target.host ?? url
            if let reason = error.underlying.flatMap({ Self.tlsReason(for: $0, host: host) }) {
                message = "\(prefix): \(reason)"
            } else {
                message = "\(prefix): \(error.message)" + (error.underlying.map { ": \($0)" } ?? "")
            }
        case .handshakeRefused:
            var text = "\(prefix): the server refused the WebSocket upgrade"
            if let status = error.httpStatus {
                text += " with HTTP \(status) \(HTTPResponseStatus(statusCode: status).reasonPhrase)"
            }
            if let body = error.httpBody, !body.isEmpty {
                text += "\n" + body
            }
            message = text
            if error.httpStatus == 401 { return CLIFailure(.unauthorized, message) }
        default:
            message = "\(prefix): \(error.message)" + (error.underlying.map { " (\($0))" } ?? "")
        }
        return CLIFailure(.unreachable, message)
    }

    /// A short reason for a socket-level error, e.g. `connection refused`; `nil` if there is none.
    static func reason(for error: any Error) -> String? {
        switch error {
        case let error as IOError:
            guard let text = strerror(error.errnoCode).map({ String(cString: $0) }), let first = text.first else {
                return nil
            }
            return first.lowercased() + text.dropFirst()
        case let error as NIOConnectionError:
            if error.connectionErrors.isEmpty {
                let dnsError = error.dnsAError ?? error.dnsAAAAError
                return "cannot resolve the host name \(error.host)" + (dnsError.map { " (\($0))" } ?? "")
            }
            var reasons: [String] = []
            for failure in error.connectionErrors {
                let reason = Self.reason(for: failure.error) ?? "\(failure.error)"
                if !reasons.contains(reason) { reasons.append(reason) }
            }
            return reasons.joined(separator: "; ")
        case ChannelError.connectTimeout:
            return "timed out"
        default:
            return nil
        }
    }

    /// A plain explanation for the common TLS failures; `nil` for the others.
    static func tlsReason(for error: any Error, host: String) -> String? {
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "the server's certificate is not valid for \(host)"
        }
        if "\(error)".contains("CERTIFICATE_VERIFY_FAILED") {
            return "the server's certificate is not trusted (--ca FILE trusts a private CA, "
                + "--insecure-localhost a self-signed certificate on localhost)"
        }
        return nil
    }

}

/// Runs a command's body; a failure is printed as `circle COMMAND: SENTENCE` (with the details
/// under `--verbose`) and ends the process with its exit status.
func reportingFailures(
    _ command: String,
    verbose: Bool,
    context: @autoclosure () -> FailureContext,
    _ body: () async throws -> Void
) async throws {
    do {
        try await body()
    } catch let error as ExitCode {
        throw error
    } catch let error as CleanExit {
        throw error
    } catch let error as ValidationError {
        throw error
    } catch {
        exitWithFailure(command, CLIFailure.from(error, context()), verbose: verbose)
    }
}

/// Prints the failure and exits with its status.
func exitWithFailure(_ command: String, _ failure: CLIFailure, verbose: Bool = false) -> Never {
    var text = "circle \(command): \(failure.message)\n"
    if verbose, let detail = failure.detail { text += "  details: \(detail)\n" }
    if !verbose, failure.detail != nil, failure.kind != .usage { text += "  (--verbose shows the details)\n" }
    Console.err(text)
    exit(failure.exitCode)
}
