import CircleHTTPClient
import CircleSocket
import CircleWire
import Foundation
import Logging
import NIOCore

@_exported import CircleSocket
@_exported import CircleWire

/// The Circle SDK: one resilient session with a Circle server.
///
/// ```swift
/// let client = try await CircleClient(configuration: .init(
///     servers: ["wss://chat.example.com/v1/ws"],
///     tokenProvider: { try await myBackend.circleToken() },
///     stateFile: appSupport.appendingPathComponent("circle.sqlite").path
/// ))
/// await client.connect()
/// Task { for await event in await client.messages(in: "general") { render(event) } }
/// let receipt = try await client.post("hello", to: "general")   // seq, time
/// ```
///
/// - Every `post` resolves exactly once: with a ``PostReceipt``, or a ``CircleClientError``
///   (rejected by the server with a reason, or timed out) — also when the connection drops and
///   returns in between: the post is re-sent with the same id and the server stores it once.
/// - Posting while disconnected queues the post in the outbox (in memory, or in ``CircleClientConfiguration/stateFile``
///   so it survives a restart); nothing crashes and nothing vanishes.
/// - ``messages(in:)`` delivers every post of a circle once and in order, across reconnects:
///   the client re-joins with the last sequence number it delivered.
/// - A heartbeat notices dead connections; reconnects back off with full jitter.
/// - ``post(photo:contentType:caption:to:id:progress:)`` uploads a photo through a resumable,
///   retried (and, with a state file, persisted) transfer queue, then posts it; ``download(media:to:progress:)``
///   resumes interrupted downloads and keeps an on-disk cache; ``transferEvents()`` reports
///   progress and ``TransferMetrics`` (docs/CLIENT.md, "Photos and transfers").
/// - Replies, edits, deletes and reactions go through the outbox like posts; read markers and
///   the circle list with unread counts (`CircleClient+Chat.swift`). With a state file the
///   client keeps an offline cache of each circle's posts in current state (``cachedPosts(in:)``),
///   and ``CircleModel`` is one circle as a UI binds to it.
public final class CircleClient: Sendable {
    /// The session (the chat calls in `CircleClient+Chat.swift` use it too).
    let core: ClientCore
    private let configuration: CircleClientConfiguration
    private let transfers: MediaTransfers
    /// The HTTP API calls (``circles()`` and the rest, in `CircleClient+API.swift`).
    let api: ServerAPI
    /// Kept-alive HTTP connections, shared by the API calls and media transfers.
    private let pool: HTTPConnectionPool

    /// Creates a client and loads its outbox and cursors. It does not connect yet.
    public convenience init(configuration: CircleClientConfiguration) async throws {
        precondition(!configuration.servers.isEmpty, "CircleClientConfiguration.servers is empty")
        let store: any ClientStateStore
        if let path = configuration.stateFile {
            store = try await SQLiteClientStateStore.open(path: path, logger: configuration.logger)
        } else {
            store = MemoryClientStateStore()
        }
        try await self.init(configuration: configuration, store: store)
    }

    /// Creates a client on a given state store (tests observe the store's calls this way).
    init(configuration: CircleClientConfiguration, store: any ClientStateStore) async throws {
        precondition(!configuration.servers.isEmpty, "CircleClientConfiguration.servers is empty")
        let (outbox, sent, cursors) = try await store.load()
        let jobs = try await store.loadPhotoJobs()
        let caches = configuration.cacheLimit > 0 ? try await store.loadCaches() : [:]
        self.configuration = configuration
        self.core = ClientCore(configuration: configuration, store: store, outbox: outbox, sent: sent, cursors: cursors, caches: caches)
        let pool = HTTPConnectionPool()
        self.pool = pool
        self.transfers = try MediaTransfers(configuration: configuration, store: store, core: self.core, jobs: jobs, pool: pool)
        let transfers = configuration.transfers
        let base = try MediaTransfers.base(configuration)
        self.api = ServerAPI(
            target: base.target,
            prefix: base.prefix,
            http: HTTPClient(
                configuration: .init(connectTimeout: transfers.connectTimeout, idleTimeout: transfers.requestTimeout, tls: configuration.socket.tls),
                pool: pool
            ),
            tokenProvider: configuration.tokenProvider
        )
    }

    /// Connects (and keeps reconnecting until ``disconnect()`` or a terminal close). Photo
    /// posts restored from the state file continue.
    public func connect() async {
        await self.core.start()
        await self.transfers.startWorker()
    }

    /// Opens one connection to the first server with a token from the provider, and closes it
    /// again: no retries, no joins. For tools and sign-in screens that must tell at once whether
    /// the server can be reached and takes the token, before ``connect()`` starts its patient
    /// reconnect loop.
    ///
    /// - Parameter timeout: for the TCP connect, TLS and the upgrade, name resolution included.
    /// - Throws: the transport's ``WebSocketError`` as it is (`connectionFailed`, `tlsFailed`,
    ///   `pinMismatch`, `handshakeRefused` with the HTTP status and body, …);
    ///   ``CircleClientError`` `timed_out` when nothing was decided within `timeout`; and what
    ///   the token provider throws.
    public func checkConnection(timeout: Duration) async throws {
        let configuration = self.configuration
        let token = try await configuration.tokenProvider()
        var socket = configuration.socket
        socket.subprotocols = [circleSubprotocol]
        socket.headers.replaceOrAdd(name: "Authorization", value: "Bearer \(token)")
        socket.connectTimeout = TimeAmount(timeout)
        let probe: WebSocket
        do {
            // A second more than the connect timeout: that one's own sentence wins when it fires.
            probe = try await WebSocket.connect(to: configuration.servers[0], configuration: socket, logger: configuration.logger, deadline: timeout + .seconds(1))
        } catch let error as WebSocketConnectDeadlineExceeded {
            throw CircleClientError(.timedOut, "no answer from \(configuration.servers[0]) within \(error.deadline)")
        }
        await probe.close(code: .normalClosure, reason: "")
    }

    /// Closes the connection and stops reconnecting. Waiting posts throw ``CircleClientError/Code/stopped``;
    /// with a state file their entries stay in the outbox and are sent after the next ``connect()``.
    /// Photo uploads stop too (resumed from the server's offset after the next ``connect()``).
    public func disconnect() async {
        await self.transfers.stop()
        await self.pool.closeAll()
        await self.core.stop()
    }

    /// Skips the backoff wait: for "the app came to the foreground" or "the network is back".
    public func reconnectNow() async { await self.core.reconnectNow() }

    /// The connection state now.
    public var state: ConnectionState { get async { await self.core.state } }

    /// The connection state as it changes, starting with the current one.
    public func states() async -> AsyncStream<ConnectionState> { await self.core.stateStream() }

    /// Uploads a photo and posts it, in one call: the upload goes through the transfer queue
    /// (retried with backoff, resumed from the server's offset after a failure, and — with a
    /// ``CircleClientConfiguration/stateFile`` — continued after an app restart, from a copy of
    /// the file the client keeps), and once the media id exists the post goes through the
    /// outbox like any other and resolves the same way.
    ///
    /// ```swift
    /// let receipt = try await client.post(photo: "/tmp/IMG_0001.jpg", caption: "sunset", to: "general") { progress in
    ///     bar.show(progress.completed, of: progress.total)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - photo: The file's path.
    ///   - contentType: `image/jpeg`, `image/png`, `image/gif`, `image/webp`; `nil` guesses from
    ///     the extension, then from the first bytes.
    ///   - caption: The post's text, if any.
    ///   - circle: Where to post.
    ///   - id: The post's id (its idempotency key); `nil` makes a new one. A photo post with an
    ///     id that is still queued (restored from the state file) is waited for, not queued again,
    ///     and the server stores a post with a given id once: a command that is simply run again
    ///     after a crash posts once.
    ///   - progress: Called as the server acknowledges bytes (from the upload's I/O; keep it quick).
    /// - Throws: ``CircleClientError``: the server refused the file (`too_large`,
    ///   `unsupported_media_type`) or the post; `timed_out` or `not_connected` after the transfer
    ///   timeouts; `stopped` when the client stopped first (the post stays queued with a state file).
    @discardableResult
    public func post(
        photo: String,
        contentType: String? = nil,
        caption: String? = nil,
        to circle: String,
        id: String? = nil,
        progress: (@Sendable (TransferProgress) -> Void)? = nil
    ) async throws -> PostReceipt {
        try await self.transfers.postPhoto(path: photo, contentType: contentType, caption: caption, circle: circle, id: id, progress: progress)
    }

    /// Uploads a file (resumable, with retries) and returns its media id, without posting.
    public func upload(file: String, contentType: String? = nil, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> UploadResult {
        try await self.transfers.uploadFile(path: file, contentType: contentType, progress: progress)
    }

    /// Downloads media: from the on-disk cache when it is fresh (revalidated with the ETag when
    /// stale), else from the server, resuming an interrupted download with `Range` and `If-Range`.
    /// The bytes are checked against the media id (their SHA-256).
    ///
    /// - Parameters:
    ///   - media: The media id (a post's `attachment`).
    ///   - destination: Where to put the file; `nil` leaves it in the cache (or a temporary file).
    ///   - progress: Called as bytes arrive.
    public func download(media: String, to destination: String? = nil, progress: (@Sendable (TransferProgress) -> Void)? = nil) async throws -> DownloadResult {
        try await self.transfers.download(media, to: destination, progress: progress)
    }

    /// Progress and per-transfer metrics (``TransferMetrics``) of every upload and download, from now on.
    public func transferEvents() -> AsyncStream<TransferEvent> { self.transfers.events() }

    /// Ids of photo posts whose upload has not finished (restored ones included).
    public var pendingPhotoPosts: [String] { get async { await self.transfers.pendingPhotoPosts } }

    /// Posts text (and optionally a media id) to a circle; see the type's documentation for the promises.
    ///
    /// - Parameters:
    ///   - text: The post's text.
    ///   - circle: Where to post.
    ///   - attachment: A media id (from ``upload(file:contentType:progress:)``).
    ///   - replyTo: The `seq` of the post this one answers (a reply); the server refuses with
    ///     `no_such_post` when it is not a post of the circle.
    @discardableResult
    public func post(_ text: String, to circle: String, attachment: String? = nil, replyTo: Int64? = nil) async throws -> PostReceipt {
        try await self.core.enqueue(OutboxEntry(id: ClientCore.newID(), circle: circle, action: .post, text: text, attachment: attachment, replyTo: replyTo, createdAt: ClientCore.nowMillis()))
    }

    /// Joins the circle (if not yet) and returns its events in order. Each call returns its own
    /// stream; the circle stays joined while any stream is alive or until ``leave(_:)``.
    ///
    /// With the offline cache (a ``CircleClientConfiguration/stateFile`` and a non-zero
    /// ``CircleClientConfiguration/cacheLimit``) the stream starts with the cached posts at once,
    /// oldest first, each in its current state (edits, deletes and reactions applied, as
    /// ``cachedPosts(in:)`` returns them), then continues with the entries after them as they
    /// come from the server, without a gap. Changes (edits, deletes, reactions) arrive as
    /// `.post` events whose ``CirclePost/change`` is set; ``CircleTimeline`` applies them.
    public func messages(in circle: String) async -> AsyncStream<CircleEvent> {
        await self.core.subscribe(circle)
    }

    /// Like ``messages(in:)``, for a reader that already shows the circle up to `seq`, the
    /// ``CircleHistoryPage/lastSeq`` of a page read before: when the client has no cursor of its
    /// own for the circle (it never followed it), the stream starts with the entries after `seq`,
    /// so what was committed between the page and the join is not missed, and nothing the page
    /// reflects comes twice. With a cursor (the circle was followed before, or is cached), the
    /// stream continues from the cursor as ``messages(in:)`` does.
    ///
    /// ```swift
    /// let page = try await client.historyPage(of: "general")
    /// show(page.posts)
    /// for await event in await client.messages(in: "general", after: page.lastSeq ?? 0) { … }
    /// ```
    public func messages(in circle: String, after seq: Int64) async -> AsyncStream<CircleEvent> {
        await self.core.subscribe(circle, after: seq)
    }

    /// Returns once `circle` is joined on the open connection (asking for the join if needed):
    /// from then on its live posts reach ``messages(in:)``. The tests wait on this instead of
    /// sleeping; throws when not connected or when the join is refused or not answered in time.
    func joined(_ circle: String) async throws { try await self.core.waitForJoin(circle) }

    /// Leaves a circle: no more events, and its cursor is kept for a later join.
    public func leave(_ circle: String) async throws { try await self.core.leave(circle) }

    /// A page of stored posts before `before` (the newest when `nil`), oldest first, and whether
    /// older ones exist. Connected, it asks the server (the `history` request of `circle.v1`;
    /// posts in their current state with reactions), and with the offline cache the page is kept
    /// in it for a joined circle (asked again, up to three times in all, while it is older than
    /// the cache; docs/CLIENT.md, "Offline reading"). Not connected, it answers from the offline
    /// cache when the client keeps one (`more` then says whether the cache holds older posts; a
    /// circle with nothing cached gives an empty page); without a cache it throws `not_connected`.
    public func history(of circle: String, before: Int64? = nil, limit: Int = HistoryPaging.defaultLimit) async throws -> (posts: [CirclePost], more: Bool) {
        let page = try await self.historyPage(of: circle, before: before, limit: limit)
        return (page.posts, page.more)
    }

    /// ``history(of:before:limit:)`` with the stream position the page reflects
    /// (``CircleHistoryPage/lastSeq``), to follow on from with ``messages(in:after:)``.
    public func historyPage(of circle: String, before: Int64? = nil, limit: Int = HistoryPaging.defaultLimit) async throws -> CircleHistoryPage {
        let page = try await self.core.history(circle, before: before, after: nil, limit: limit)
        return CircleHistoryPage(posts: page.posts, more: page.more, lastSeq: page.lastSeq)
    }

    /// Paging forwards: the oldest `limit` posts with `seq > after`, oldest first, and whether
    /// newer ones exist. To read on, pass the last post's `seq`. Not connected, it answers from the
    /// offline cache like ``history(of:before:limit:)``.
    ///
    /// ```swift
    /// var cursor: Int64 = 0
    /// while true {
    ///     let page = try await client.history(of: "general", after: cursor, limit: 200)
    ///     page.posts.forEach(show)
    ///     cursor = page.posts.last?.seq ?? cursor
    ///     if !page.more { break }
    /// }
    /// ```
    public func history(of circle: String, after: Int64, limit: Int = HistoryPaging.defaultLimit) async throws -> (posts: [CirclePost], more: Bool) {
        let page = try await self.core.history(circle, before: nil, after: after, limit: limit)
        return (page.posts, page.more)
    }

    /// Tells the circle this user is typing.
    public func typing(in circle: String) async throws { try await self.core.typing(circle) }

    /// The posts not yet acknowledged, in order.
    public var outbox: [OutboxEntry] { get async { await self.core.outboxEntries } }

    /// Outbox events (queued, sent, failed) from now on; entries restored from the state file
    /// report their fate here, since no `post` call waits for them.
    public func outboxEvents() async -> AsyncStream<OutboxEvent> { await self.core.outboxStream() }

    /// Circles that join the user's list from now on, while connected: someone added them to a
    /// circle or started a direct message with them (docs/CLIENT.md, "The circle list"). Join
    /// the circle to read it; `circles()` lists them all.
    public func circleListEvents() async -> AsyncStream<CircleListEvent> { await self.core.circleListStream() }

    /// The last sequence number delivered for a circle.
    public func cursor(of circle: String) async -> Int64? { await self.core.cursor(of: circle) }

    /// Stops for good and releases the state file. Every stream the client handed out
    /// (``messages(in:)``, ``states()``, ``outboxEvents()``, ``transferEvents()``) ends after the
    /// events it already holds, so a `for await` over it returns; streams asked for afterwards
    /// end at once. Use ``disconnect()`` to stop only for a while.
    public func shutdown() async {
        await self.transfers.stop()
        await self.pool.closeAll()
        await self.core.stop()
        await self.core.finishStreams()
        self.transfers.finishEvents()
        await self.core.closeStore()
    }
}
