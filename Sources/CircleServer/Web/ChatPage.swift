import Crypto
import Foundation
import NIOCore
import HTTPTypes
import Hummingbird

/// The browser chat page: the files in `Web/page` (HTML, CSS, JavaScript, an icon, the web app
/// manifest and the service worker; no build step, no CDN), shipped as this target's package resources and served at `/` and
/// `/assets/NAME` with a strict Content-Security-Policy (docs/API.md, "The chat page").
///
/// The files are read once, from the resource folder SwiftPM puts beside the executable
/// (`Circle_CircleServer.resources` on Linux, `Circle_CircleServer.bundle` on macOS). They are
/// looked up by hand rather than through `Bundle.module`, whose accessor stops the process when
/// the folder is missing (a binary copied without it): here the page answers 503 and says what
/// is missing, and the rest of the server is unaffected.
struct ChatPage: Sendable {
    /// One file of the page, ready to send.
    struct Asset: Sendable {
        var body: ByteBuffer
        var contentType: String
        /// A strong validator: the quoted start of the content's SHA-256.
        var etag: String
    }

    /// The files by name (`index.html`, `app.js`, …); empty when the resources were not found.
    let assets: [String: Asset]
    /// Where the files were read from, or nil.
    let directory: URL?

    /// The page of this process, read on first use.
    static let shared = ChatPage.load()

    /// The headers every response of the page carries. The page has no inline script or style, so
    /// the policy allows scripts and styles from the server only; images may also be `blob:`
    /// (a photo's preview before its upload) and `data:`; the WebSocket is `connect-src`.
    static let securityHeaders: [(String, String)] = [
        (
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self' ws: wss:; "
                + "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
        ),
        ("X-Frame-Options", "DENY"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
    ]

    static let contentTypes: [String: String] = [
        "html": "text/html; charset=utf-8",
        "css": "text/css; charset=utf-8",
        "js": "text/javascript; charset=utf-8",
        "svg": "image/svg+xml",
        "png": "image/png",
        "webmanifest": "application/manifest+json",
    ]

    /// The service worker (`sw.js`): served under `assets/` but registered with the page's own
    /// scope (`/`, or `/chat/` when mounted there), which its `Service-Worker-Allowed: ../`
    /// header (relative to the script) allows (docs/PAGE.md, "Installable app and notifications").
    static let serviceWorker = "sw.js"

    /// The folder names SwiftPM gives this target's resources.
    static let bundleNames = ["Circle_CircleServer.resources", "Circle_CircleServer.bundle"]

    static func load() -> ChatPage {
        var candidates: [URL] = []
        var roots = [Bundle.main.bundleURL]
        if let resources = Bundle.main.resourceURL { roots.append(resources) }
        if let executable = Bundle.main.executableURL {
            roots.append(executable.deletingLastPathComponent())
            roots.append(executable.resolvingSymlinksInPath().deletingLastPathComponent())
        }
        for root in roots {
            for name in Self.bundleNames {
                candidates.append(root.appendingPathComponent(name).appendingPathComponent("Contents/Resources/page"))
                candidates.append(root.appendingPathComponent(name).appendingPathComponent("page"))
            }
        }
        for directory in candidates {
            let index = directory.appendingPathComponent("index.html")
            guard FileManager.default.fileExists(atPath: index.path) else { continue }
            return ChatPage(directory: directory)
        }
        return ChatPage(assets: [:], directory: nil)
    }

    init(assets: [String: Asset], directory: URL?) {
        self.assets = assets
        self.directory = directory
    }

    /// Reads every file of `directory` whose type the page serves.
    init(directory: URL) {
        var assets: [String: Asset] = [:]
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        for name in names {
            let ext = (name as NSString).pathExtension.lowercased()
            guard let contentType = Self.contentTypes[ext],
                let data = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path)
            else { continue }
            let digest = hexString(SHA256.hash(data: data).prefix(12))
            assets[name] = Asset(body: ByteBuffer(bytes: data), contentType: contentType, etag: "\"\(digest)\"")
        }
        self.init(assets: assets, directory: directory)
    }

    /// The answer to `GET /` (`name` nil) or `GET /assets/NAME`.
    func response(for name: String?, headers requestHeaders: HTTPFields) -> Response {
        guard !self.assets.isEmpty else {
            var response = APIError(
                .serviceUnavailable,
                .unavailable,
                "the chat page's files are missing: install the Circle_CircleServer.resources folder from the build beside this executable"
            ).response
            self.addSecurityHeaders(to: &response.headers)
            return response
        }
        guard let asset = self.assets[name ?? "index.html"], name != "index.html" else {
            var response = APIError(.notFound, .notFound, "no asset \(name ?? "")").response
            self.addSecurityHeaders(to: &response.headers)
            return response
        }
        var headers: HTTPFields = [.contentType: asset.contentType, .eTag: asset.etag, .cacheControl: "no-cache"]
        if name == Self.serviceWorker, let allowed = HTTPField.Name("Service-Worker-Allowed") { headers[allowed] = "../" }
        // Always revalidated (cheap with the ETag), so a new server version's page is used at once.
        self.addSecurityHeaders(to: &headers)
        if let tags = requestHeaders[.ifNoneMatch],
            tags.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == asset.etag })
        {
            return Response(status: .notModified, headers: headers)
        }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: asset.body))
    }

    func addSecurityHeaders(to headers: inout HTTPFields) {
        for (name, value) in Self.securityHeaders {
            if let field = HTTPField.Name(name) { headers[field] = value }
        }
    }
}
