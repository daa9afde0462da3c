import ArgumentParser
import CircleClient
import CircleWire
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct ChatCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat",
        abstract: "A full-screen chat in the terminal.",
        discussion: """
            Shows the circle's recent posts, live posts and who is typing, with an input line at \
            the bottom and the connection state at the top. Your posts show "sending…" until the \
            server acknowledges them, then their number; a refused post says why. Posts typed \
            while offline wait and go out when the connection is back. Consecutive posts of one \
            author are grouped under one name; photos show as [photo] with their caption. Edits, \
            deletes and reactions change the posts they target ("(edited)", "message deleted", \
            "[👍 2]"); a reply shows a line quoting what it answers. What the chat shows is \
            marked read (your unread counts elsewhere drop). "bob joined" is shown when someone \
            comes online, not when they reconnect; "bob left" once they have stayed away for two \
            minutes.

            Keys: Enter posts · Page Up loads older posts · Ctrl-C, or Ctrl-D on an empty line, \
            leaves.
            Commands: \(ChatScreen.commandSummary)

            Exit status: 0 left; 1 the circle does not exist or you may not read it; 2 the server \
            could not be reached; 4 the token was refused, or none could be made; 64 usage (or \
            not a terminal).

            Examples:
              circle chat general --user alice --data ./circle-data
              circle chat team --token "$TOKEN" --server wss://chat.example.com/v1/ws
            """
    )

    @Argument(help: "The circle.")
    var circle: String

    @OptionGroup var client: ClientOptions

    @OptionGroup var discovery: ChatDiscoveryOptions

    // The presence rules' times (PresenceNotices.Timing), shortened by tests.
    @Option(name: .customLong("presence-settle"), help: .hidden)
    var presenceSettle: Double = 30

    @Option(name: .customLong("presence-away"), help: .hidden)
    var presenceAway: Double = 120

    func validate() throws {
        for (name, value) in [("--presence-settle", self.presenceSettle), ("--presence-away", self.presenceAway)]
        where !value.isFinite || value < 0 || value > 86_400 {
            throw ValidationError("\(name) takes a number of seconds from 0 to 86400, not \(value)")
        }
    }

    func run() async throws {
        guard isatty(STDIN_FILENO) == 1, isatty(STDOUT_FILENO) == 1 else {
            throw ValidationError("circle chat needs a terminal; for scripts use `circle send` and `circle tail`")
        }
        var connected: CircleClient?
        // --discover replaces --server with a server found on the local network.
        let options = try await self.chatClientOptions()
        try await reportingFailures("chat", verbose: options.verbose, context: options.context(circle: self.circle)) {
            // Everything that can fail is checked before the screen is taken over.
            let configuration = try options.clientConfiguration(postTimeout: .seconds(120), logs: false)
            connected = try await options.connect(configuration, circle: self.circle, timeout: .seconds(10))
        }
        guard let client = connected else { return }
        let user = options.userName
        let timing = PresenceNotices.Timing(settle: .milliseconds(Int64(self.presenceSettle * 1000)), away: .milliseconds(Int64(self.presenceAway * 1000)))
        let screen = ChatScreen(circle: self.circle, user: user, colours: Console.colours(on: STDOUT_FILENO), presence: timing)
        let terminal = RawTerminal()
        terminal.enter()
        defer { terminal.leave() }
        let resize = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: .global())
        resize.setEventHandler { Task { await screen.redraw() } }
        resize.resume()
        defer { resize.cancel() }
        await screen.redraw()
        // Display names, where the server has accounts (a server without any answers an empty list).
        if let profiles = try? await client.profiles() { await screen.setDisplayNames(profiles) }
        if let circle = try? await client.circle(named: self.circle) { await screen.setOrigin(circle) }

        // Newest page first, then the stream from where the page ends: a post committed between
        // the two is not lost (nor an entry the page reflects shown twice).
        var shownUpTo: Int64?
        if let page = try? await client.historyPage(of: self.circle, limit: HistoryPaging.defaultLimit) {
            await screen.addHistory(page.posts, more: page.more)
            shownUpTo = page.lastSeq ?? page.posts.last?.seq
            if let seq = await screen.unmarkedRead() { _ = try? await client.markRead(self.circle, upTo: seq) }
        }
        let events: AsyncStream<CircleEvent>
        if let shownUpTo {
            events = await client.messages(in: self.circle, after: shownUpTo)
        } else {
            events = await client.messages(in: self.circle)
        }
        let circle = self.circle
        let states = await client.states()
        let outbox = await client.outboxEvents()
        let listed = await client.circleListEvents()
        let tasks = [
            Task {
                // The chat shows the newest entries as they come: they are read.
                for await event in events {
                    await screen.handle(event)
                    if let seq = await screen.unmarkedRead() { _ = try? await client.markRead(circle, upTo: seq) }
                }
            },
            Task { for await state in states { await screen.setState(state, waiting: await client.outbox.count) } },
            Task { for await event in outbox { await screen.handle(event) } },
            Task {
                // A DM someone started with this user, a circle they were added to: said where it is.
                for await case .added(let circle) in listed {
                    if let members = circle.direct {
                        let others = members.filter { $0 != user }.joined(separator: ", ")
                        await screen.noteLine("\(others) started a direct message with you: open it with `circle chat \(circle.name)`")
                    } else {
                        await screen.noteLine("you were added to \(circle.name) (owner \(circle.owner)): open it with `circle chat \(circle.name)`")
                    }
                }
            },
            Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(500))
                    await screen.tick()
                }
            },
        ]
        defer { for task in tasks { task.cancel() } }

        for await key in terminal.keys() {
            switch await screen.input(key) {
            case .none:
                break
            case .quit:
                await client.shutdown()
                return
            case .post(let text, let replyTo):
                let screen = screen
                Task {
                    do {
                        _ = try await client.post(text, to: self.circle, replyTo: replyTo)
                    } catch let error as CircleClientError {
                        await screen.failedPost(text, reason: error.message)
                    }
                }
            case .change(let change):
                let (screen, circle) = (screen, self.circle)
                Task {
                    do {
                        switch change {
                        case .edit(let seq, let text): try await client.edit(seq, in: circle, text: text)
                        case .delete(let seq): try await client.delete(seq, in: circle)
                        case .react(let emoji, let seq): try await client.react(emoji, to: seq, in: circle)
                        case .unreact(let emoji, let seq): try await client.unreact(emoji, from: seq, in: circle)
                        }
                    } catch let error as CircleClientError {
                        await screen.refused(change, reason: error.message)
                    }
                }
            case .circles:
                let screen = screen
                Task {
                    do {
                        await screen.showCircles(try await client.circleSummaries())
                    } catch let error as CircleClientError {
                        await screen.showCircles(nil, reason: error.message)
                    }
                }
            case .older:
                if let oldest = await screen.oldestSeq, let page = try? await client.history(of: self.circle, before: oldest, limit: HistoryPaging.defaultLimit) {
                    await screen.addHistory(page.posts, more: page.more)
                }
            case .typing:
                try? await client.typing(in: self.circle)
            case .directMessage(let names):
                let screen = screen
                Task {
                    do {
                        let dm = try await client.startDirectMessage(with: names)
                        await screen.noteLine("direct message with \(dm.direct?.joined(separator: ", ") ?? dm.name): open it with `circle chat \(dm.name)`")
                    } catch let error as CircleClientError {
                        await screen.noteLine("the direct message could not be started: \(error.message)")
                    }
                }
            }
        }
        await client.shutdown()
    }
}

/// The chat's state and its drawing: a header with the connection state, the posts (with the
/// presence and command notes where they happened), who is typing, and the input line.
/// Everything is redrawn on each change (a screenful is small).
actor ChatScreen {
    enum Change: Sendable {
        case edit(Int64, String)
        case delete(Int64)
        case react(String, Int64)
        case unreact(String, Int64)
    }

    enum Command { case none, quit, post(String, replyTo: Int64?), change(Change), circles, older, typing, directMessage([String]) }

    /// The slash commands, for `--help` and `/help` (a line each).
    static let commands = [
        "/edit TEXT edits your last post", "/delete [SEQ] deletes your last post (or #SEQ)",
        "/react EMOJI [SEQ] reacts to the last post (or #SEQ); again takes it back", "/reply SEQ TEXT answers #SEQ",
        "/circles lists the circles with unread and mention counts", "/dm NAME [NAME…] starts a direct message",
        "/older loads older posts", "/help lists the commands", "Tab completes a name after @",
        "/quit leaves", "//TEXT posts text that starts with /",
    ]
    static let commandSummary = commands.joined(separator: " · ")

    /// Display names of people with accounts (`GET /v1/users`), by user name.
    private var displayNames: [String: String] = [:]

    func setDisplayNames(_ profiles: [HTTPAPI.Profile]) {
        self.displayNames = Dictionary(profiles.filter { !$0.displayName.isEmpty }.map { ($0.name, $0.displayName) }, uniquingKeysWith: { first, _ in first })
        self.redraw()
    }

    /// How an author is shown: "Ada (ada)" when they chose a display name other than their user
    /// name (the user name stays, so a display name cannot pass for someone else's), else the name.
    private func shown(_ author: String) -> String {
        guard let display = self.displayNames[author], display != author else { return author }
        return "\(display) (\(author))"
    }

    private struct Line {
        var seq: Int64?
        var author: String
        var text: String
        var status: String
        var time: Int64
        var edited = false
        var deleted = false
        var replyTo: Int64?
        /// Emoji in the order they were first used, each with who reacted.
        var reactions: [(emoji: String, users: [String])] = []
        /// Who the post mentions (resolved by the server), and whether it mentions everyone.
        var mentions: [String] = []
        var mentionsEveryone = false
        /// A system entry in words ("ann added bob"): shown as a quiet line of its own.
        var system: String?
    }

    /// A line that is not a post (someone joined or left, a command's answer), shown after the
    /// posts that were there when it happened.
    private struct Note {
        var afterSeq: Int64
        var order: Int
        var text: String
    }

    private let circle: String
    private let user: String
    private let colours: Bool
    private var posts: [Int64: Line] = [:]
    private var pending: [(id: String?, line: Line)] = []
    private var notes: [Note] = []
    private var noteCounter = 0
    private var more = false
    /// Whether a history page has been shown: until then `more` says nothing.
    private var historyShown = false
    /// The circle's start ("alice created team" and when), shown above its first entry once the
    /// history reaches it; `nil` where system entries are off.
    private var origin: String?
    /// The circle's posts in their current state (edits, deletes, reactions applied); `posts`
    /// holds how each shows.
    private var timeline: CircleWire.CircleTimeline
    /// The newest seq seen, posts and changes alike.
    private var lastEntry: Int64 = 0
    /// The read marker last sent.
    private var markedRead: Int64 = 0
    private var input: [UInt8] = []
    private var escape: [UInt8] = []
    private var state = "connecting…"
    private var typing: [String: ContinuousClock.Instant] = [:]
    private var lastTypingSent = ContinuousClock.now - .seconds(10)
    /// Which `joined` and `left` events get a line.
    private var presence: PresenceNotices
    private var connected = false

    init(circle: String, user: String, colours: Bool = false, presence: PresenceNotices.Timing = .init()) {
        self.circle = circle
        self.user = user
        self.colours = colours
        self.timeline = CircleWire.CircleTimeline(viewer: user)
        // The chat is made right after its first join.
        self.presence = PresenceNotices(timing: presence, joinedAt: .now)
    }

    var oldestSeq: Int64? { self.more ? self.posts.keys.min() : nil }

    func setOrigin(_ circle: HTTPAPI.Circle) {
        self.origin = circle.systemEntries ? "\(circle.originText) · \(Self.day(circle.createdAt))" : nil
        self.redraw()
    }

    func addHistory(_ page: [CirclePost], more: Bool) {
        // A history page gives posts as they are now, reactions included.
        self.timeline.merge(page)
        for post in page where post.change == nil {  // posts and system entries
            if let current = self.timeline.post(post.seq) { self.posts[post.seq] = Self.line(current) }
        }
        self.lastEntry = max(self.lastEntry, self.timeline.lastSeq)
        if page.isEmpty || self.posts.keys.min() == page.first?.seq { self.more = more }
        self.historyShown = true
        self.redraw()
    }

    func handle(_ event: CircleEvent) {
        switch event {
        case .post(let entry):
            // Posts and changes alike go through the one CircleTimeline (idempotent: a replay
            // after a reconnect changes nothing).
            switch self.timeline.apply(entry) {
            case .added(let post), .updated(let post): self.posts[post.seq] = Self.line(post)
            case .none: break
            }
            self.lastEntry = max(self.lastEntry, self.timeline.lastSeq)
            if let change = entry.change {
                // Reactions are also said where they happened.
                if change == .react || change == .unreact, let text = EntryFormat.change(entry) {
                    self.notes.append(Note(afterSeq: entry.seq, order: self.nextNote(), text: text))
                    self.trimNotes()
                }
            } else if entry.isPost {
                self.pending.removeAll { $0.id == entry.id }
                self.typing[entry.author] = nil
            }
        case .gap(let from, let to):
            self.note("posts \(from)–\(to) are missing")
        case .typing(let user):
            self.typing[user] = .now
            if user != self.user { self.presence.seen(user) }
        case .joined(let user):
            if user != self.user, self.presence.joined(user, at: .now) { self.note("\(user) joined") }
        case .left(let user):
            if user != self.user {
                self.typing[user] = nil
                // Said by `tick` once the user has stayed away, where they left.
                self.presence.left(user, afterSeq: self.posts.keys.max() ?? 0, at: .now)
            }
        case .read(let seq):
            // Read on another connection of this user: nothing to mark from here up to there.
            self.markedRead = max(self.markedRead, seq)
        case .notify(let level):
            self.note("notifications here: \(level.rawValue)")
        }
        self.redraw()
    }

    private func nextNote() -> Int {
        self.noteCounter += 1
        return self.noteCounter
    }

    private func trimNotes() {
        if self.notes.count > 100 { self.notes.removeFirst(self.notes.count - 100) }
    }

    /// Shows a line that is not a post (a command's answer) and draws the screen again.
    func noteLine(_ text: String) {
        self.note(text)
        self.redraw()
    }

    private func note(_ text: String) {
        self.noteCounter += 1
        self.notes.append(Note(afterSeq: self.posts.keys.max() ?? 0, order: self.noteCounter, text: text))
        if self.notes.count > 100 { self.notes.removeFirst(self.notes.count - 100) }
    }

    func handle(_ event: OutboxEvent) {
        switch event {
        case .queued(let entry) where entry.action != .post, .sent(let entry, _) where entry.action != .post,
            .failed(let entry, _) where entry.action != .post:
            // Edits, deletes and reactions: their calls report a refusal (ChatScreen.refused).
            break
        case .queued(let entry):
            if let index = self.pending.firstIndex(where: { $0.id == nil && $0.line.text == entry.text }) {
                self.pending[index].id = entry.id
            }
        case .sending:
            break
        case .sent(let entry, let receipt):
            self.pending.removeAll { $0.id == entry.id }
            if self.posts[receipt.seq] == nil {
                self.posts[receipt.seq] = Line(seq: receipt.seq, author: self.user, text: entry.text ?? "", status: "", time: receipt.time)
            }
        case .failed(let entry, let error):
            if let index = self.pending.firstIndex(where: { $0.id == entry.id }) {
                self.pending[index].line.status = "not posted: \(error.message)"
            }
        }
        self.redraw()
    }

    func failedPost(_ text: String, reason: String) {
        if let index = self.pending.firstIndex(where: { $0.line.text == text && $0.line.status == "sending…" }) {
            self.pending[index].line.status = "not posted: \(reason)"
        }
        self.redraw()
    }

    func setState(_ state: ConnectionState, waiting: Int) {
        // The client joins the circle again on every connection.
        if case .connected = state {
            if !self.connected { self.presence.joinedCircle(at: .now) }
            self.connected = true
        } else if self.connected {
            self.connected = false
            self.presence.connectionLost(at: .now)
        }
        switch state {
        case .connected: self.state = "connected"
        case .connecting: self.state = "connecting…"
        case .disconnected: self.state = "offline"
        case .waitingToReconnect(let until, _):
            let seconds = max(0, Int(((until - .now).components.seconds)))
            self.state = "reconnecting in \(seconds) s"
        case .closed(let reason): self.state = CLIFailure.describe(reason)
        }
        let queued = self.pending.filter { $0.line.status == "sending…" }.count
        if self.state != "connected", max(waiting, queued) > 0 { self.state += " · \(max(waiting, queued)) posts waiting" }
        self.redraw()
    }

    func tick() {
        let stale = self.typing.filter { ContinuousClock.now - $0.value > .seconds(4) }
        for (user, _) in stale { self.typing[user] = nil }
        let gone = self.presence.dueLeaves(at: .now)
        for leave in gone {
            self.notes.append(Note(afterSeq: leave.afterSeq, order: self.nextNote(), text: "\(leave.user) left"))
            self.trimNotes()
        }
        if !stale.isEmpty || !gone.isEmpty { self.redraw() }
    }

    func input(_ byte: UInt8) -> Command {
        if !self.escape.isEmpty || byte == 0x1B {
            self.escape.append(byte)
            if self.escape == [0x1B, 0x5B, 0x35, 0x7E] {  // Page Up
                self.escape = []
                return .older
            }
            if self.escape.count >= 4 || (self.escape.count >= 3 && (0x40...0x7E).contains(byte) && byte != 0x35) { self.escape = [] }
            return .none
        }
        switch byte {
        case 3: return .quit  // Ctrl-C
        case 4: return self.input.isEmpty ? .quit : .none  // Ctrl-D
        case 13, 10:
            let text = String(decoding: self.input, as: UTF8.self).trimmingCharacters(in: .whitespaces)
            self.input = []
            self.redraw()
            if text.isEmpty { return .none }
            var post = text
            if text.hasPrefix("//") {
                post = String(text.dropFirst())
            } else if text.hasPrefix("/") {
                return self.command(text)
            }
            self.pending.append((nil, Line(seq: nil, author: self.user, text: post, status: "sending…", time: Int64(Date().timeIntervalSince1970 * 1000))))
            self.redraw()
            return .post(post, replyTo: nil)
        case 9:  // Tab: complete the name after "@"
            self.completeMention()
            return .none
        case 127, 8:
            // Remove one character: its continuation bytes, then its first byte.
            while let last = self.input.last, (0x80...0xBF).contains(last) { self.input.removeLast() }
            if !self.input.isEmpty { self.input.removeLast() }
            self.redraw()
            return .none
        default:
            guard byte >= 0x20 else { return .none }
            self.input.append(byte)
            self.redraw()
            if ContinuousClock.now - self.lastTypingSent > .seconds(2) {
                self.lastTypingSent = .now
                return .typing
            }
            return .none
        }
    }

    /// Completes the `@name` at the end of the input from the names seen here (authors, people
    /// with accounts): the whole name when one fits, else as far as all that fit agree.
    private func completeMention() {
        let text = String(decoding: self.input, as: UTF8.self)
        guard let partial = MentionParser.partialMention(atEndOf: text) else { return }
        var names = Set(self.posts.values.map(\.author)).union(self.displayNames.keys).union(self.typing.keys)
        names.remove(self.user)
        let fitting = names.filter { $0.lowercased().hasPrefix(partial.lowercased()) }.sorted()
        guard let first = fitting.first else { return }
        var completion = first
        if fitting.count > 1 {
            completion = fitting.dropFirst().reduce(first) { common, name in String(zip(common, name).prefix { $0 == $1 }.map(\.0)) }
            if completion.count <= partial.count {
                self.note("@" + partial + ": " + fitting.prefix(8).joined(separator: ", "))
                self.redraw()
                return
            }
        } else {
            completion += " "
        }
        self.input = Array(text.dropLast(partial.count).utf8) + Array(completion.utf8)
        self.redraw()
    }

    /// A line starting with one `/`: a command, never posted.
    private func command(_ text: String) -> Command {
        let name = text.dropFirst().prefix { $0 != " " }.lowercased()
        switch name {
        case "quit", "exit", "q":
            return .quit
        case "older":
            return .older
        case "help", "?":
            self.note("keys: Enter posts, Page Up loads older posts, Ctrl-C leaves; commands:")
            for command in Self.commands { self.note(command) }
        case "edit", "delete", "react", "reply":
            if let command = self.changeCommand(name, arguments: text.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces)) {
                return command
            }
        case "circles":
            return .circles
        case "dm":
            let names = text.dropFirst(3).split(whereSeparator: { $0 == " " || $0 == "," }).map { String($0.hasPrefix("@") ? $0.dropFirst() : $0) }
            guard !names.isEmpty else {
                self.note("/dm NAME [NAME…] starts (or finds) a direct message, for example /dm bob")
                break
            }
            return .directMessage(names)
        default:
            self.note("unknown command /\(name), not posted — /help lists the commands; //TEXT posts text that starts with /")
        }
        self.redraw()
        return .none
    }

    /// `/edit`, `/delete`, `/react`, `/reply`: the command, or `nil` after a note saying what is wrong.
    private func changeCommand(_ name: String, arguments: String) -> Command? {
        let words = arguments.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        func seq(_ word: String) -> Int64? { Int64(word.hasPrefix("#") ? String(word.dropFirst()) : word) }
        let ownLast = self.posts.filter { $0.value.author == self.user && !$0.value.deleted && $0.value.system == nil }.keys.max()
        switch name {
        case "edit":
            guard !arguments.isEmpty else {
                self.note("/edit TEXT replaces the text of your last post")
                return nil
            }
            guard let target = ownLast else {
                self.note("you have no post here to edit")
                return nil
            }
            return .change(.edit(target, arguments))
        case "delete":
            let target = words.first.flatMap(seq) ?? ownLast
            guard words.count <= 1, words.first.map({ seq($0) != nil }) ?? true else {
                self.note("/delete [SEQ]: SEQ is a post number, for example /delete 12")
                return nil
            }
            guard let target else {
                self.note("you have no post here to delete")
                return nil
            }
            return .change(.delete(target))
        case "react":
            guard let emoji = words.first, words.count <= 2 else {
                self.note("/react EMOJI [SEQ], for example /react 👍 or /react 🎉 12")
                return nil
            }
            let last = self.posts.filter { !$0.value.deleted && $0.value.system == nil }.keys.max()
            guard let target = words.count == 2 ? seq(words[1]) : last else {
                self.note(words.count == 2 ? "/react EMOJI [SEQ]: SEQ is a post number" : "there is no post here to react to")
                return nil
            }
            let mine = self.posts[target]?.reactions.first { $0.emoji == emoji }?.users.contains(self.user) ?? false
            return .change(mine ? .unreact(emoji, target) : .react(emoji, target))
        default:  // reply
            guard words.count >= 2, let target = seq(words[0]) else {
                self.note("/reply SEQ TEXT, for example /reply 12 sounds good")
                return nil
            }
            let text = arguments.dropFirst(words[0].count).trimmingCharacters(in: .whitespaces)
            var line = Line(seq: nil, author: self.user, text: text, status: "sending…", time: Int64(Date().timeIntervalSince1970 * 1000))
            line.replyTo = target
            self.pending.append((nil, line))
            return .post(text, replyTo: target)
        }
    }

    /// A change the server (or the outbox) refused: said where it happened.
    func refused(_ change: Change, reason: String) {
        switch change {
        case .edit(let seq, _): self.note("#\(seq) was not edited: \(reason)")
        case .delete(let seq): self.note("#\(seq) was not deleted: \(reason)")
        case .react(let emoji, let seq): self.note("\(emoji) was not added to #\(seq): \(reason)")
        case .unreact(let emoji, let seq): self.note("\(emoji) was not taken back from #\(seq): \(reason)")
        }
        self.redraw()
    }

    /// The answer to `/circles`: each circle with its unread count.
    func showCircles(_ circles: [CircleSummary]?, reason: String = "") {
        guard let circles else {
            self.note("the circles could not be listed: \(reason)")
            self.redraw()
            return
        }
        func listed(_ circle: CircleSummary) -> String {
            var name = circle.direct.map { "dm " + $0.filter { $0 != self.user }.joined(separator: ", ") + " (\(circle.name))" } ?? circle.name
            if circle.name == self.circle { name += " (here)" }
            if circle.readOnly { name += " read-only" }
            if circle.unread > 0 { name += " \(circle.unreadText) unread" }
            if circle.mentions > 0 { name += " \(circle.mentions) @" }
            return name
        }
        let circlesOnly = circles.filter { $0.direct == nil }.map(listed)
        let direct = circles.filter { $0.direct != nil }.map(listed)
        self.note("circles: " + (circlesOnly.isEmpty ? "none" : circlesOnly.joined(separator: " · ")))
        if !direct.isEmpty { self.note("direct messages: " + direct.joined(separator: " · ")) }
        self.redraw()
    }

    /// The newest entry when it is newer than the read marker last sent (and records it as sent).
    func unmarkedRead() -> Int64? {
        guard self.lastEntry > self.markedRead else { return nil }
        self.markedRead = self.lastEntry
        return self.lastEntry
    }

    /// How a post shows: its text, or for a photo `[photo] caption` (`[photo 9f86d0]` without one).
    private static func line(_ post: CirclePost) -> Line {
        var text = post.text ?? ""
        if let attachment = post.attachment {
            let caption = text.trimmingCharacters(in: .whitespaces)
            text = caption.isEmpty ? "[photo \(attachment.prefix(6))]" : "[photo] \(caption)"
        }
        var line = Line(seq: post.seq, author: post.author, text: text, status: "", time: post.time)
        line.edited = post.edited != nil
        line.deleted = post.deleted
        line.replyTo = post.replyTo
        line.reactions = (post.reactions ?? []).map { (emoji: $0.emoji, users: $0.users) }
        line.mentions = post.mentions ?? []
        line.mentionsEveryone = post.mentionsEveryone
        line.system = post.systemText
        return line
    }

    /// One line on screen: the plain text (for measuring and wrapping) and how it is drawn.
    private struct Row {
        var plain: String
        var styled: String
    }

    private func style(_ text: String, _ code: String) -> String {
        self.colours ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    /// A colour per author (the same one each time), and bold for yourself.
    private func authorStyle(_ author: String) -> String {
        if author == self.user { return "1" }
        let palette = ["32", "33", "34", "35", "36", "91", "92", "94", "95", "96"]
        var hash: UInt32 = 2_166_136_261
        for byte in author.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        return palette[Int(hash % UInt32(palette.count))]
    }

    private func rows() -> [Row] {
        var rows: [Row] = []
        let ordered = self.notes.sorted { ($0.afterSeq, $0.order) < ($1.afterSeq, $1.order) }
        var noteIndex = 0
        var previous: Line?
        func addNotes(through seq: Int64) {
            while noteIndex < ordered.count, ordered[noteIndex].afterSeq <= seq {
                let text = "   — \(ordered[noteIndex].text)"
                rows.append(Row(plain: text, styled: self.style(text, "2")))
                noteIndex += 1
                previous = nil
            }
        }
        if self.historyShown, !self.more, let origin = self.origin {
            let text = "   — \(origin)"
            rows.append(Row(plain: text, styled: self.style(text, "2")))
        }
        let seqs = self.posts.keys.sorted()
        if let first = seqs.first { addNotes(through: first - 1) }
        for seq in seqs {
            guard var post = self.posts[seq] else { continue }
            if let system = post.system {
                let text = "#\(seq) \(Self.clock(post.time)) — \(system)"
                rows.append(Row(plain: text, styled: self.style(text, "2")))
                previous = nil
                addNotes(through: seq)
                continue
            }
            if post.deleted {
                let text = "#\(seq) \(Self.clock(post.time)) \(self.shown(post.author)): message deleted"
                rows.append(Row(plain: text, styled: self.style(text, "2")))
                previous = nil
                addNotes(through: seq)
                continue
            }
            if let replyTo = post.replyTo {
                let quoted = self.posts[replyTo].map { $0.deleted ? "message deleted" : "\(self.shown($0.author)): \($0.text)" } ?? "#\(replyTo)"
                let quote = "   ↳ reply to #\(replyTo) \(Self.shorten(quoted, 50))"
                rows.append(Row(plain: quote, styled: self.style(quote, "2")))
                previous = nil
            }
            if post.edited { post.text += " (edited)" }
            post.text += EntryFormat.reactions(post.reactions.map { (emoji: $0.emoji, count: $0.users.count) })
            let prefix = "#\(seq) \(Self.clock(post.time)) "
            // Consecutive posts of one author within five minutes share the name.
            let continues = previous.map { $0.author == post.author && post.time - $0.time < 300_000 } ?? false
            let name = self.shown(post.author)
            // A post that mentions the user is marked and drawn in bold.
            let mentioned = post.mentionsEveryone || post.mentions.contains(self.user)
            let text = mentioned ? "@ " + post.text : post.text
            if mentioned {
                rows.append(Row(plain: prefix + name + ": " + text, styled: self.style(prefix, "2") + self.style(name + ": " + text, "1;33")))
            } else if continues {
                let indent = String(repeating: " ", count: name.count + 2)
                rows.append(Row(plain: prefix + indent + post.text, styled: self.style(prefix, "2") + indent + post.text))
            } else {
                rows.append(
                    Row(
                        plain: prefix + name + ": " + post.text,
                        styled: self.style(prefix, "2") + self.style(name, self.authorStyle(post.author)) + ": " + post.text
                    )
                )
            }
            previous = post
            addNotes(through: seq)
        }
        addNotes(through: .max)
        for (_, line) in self.pending {
            let failed = line.status.hasPrefix("not posted")
            let plain = "   \(Self.clock(line.time)) \(line.author): \(line.text)  (\(line.status))"
            rows.append(Row(plain: plain, styled: failed ? self.style(plain, "31") : self.style(plain, "2")))
        }
        return rows
    }

    func redraw() {
        let (rows, columns) = RawTerminal.size()
        let body = max(1, rows - 4)
        var wrapped: [String] = []
        for row in self.rows() {
            if row.plain.count > columns {
                wrapped += Self.wrap(row.plain, width: columns)
            } else {
                wrapped.append(row.styled)
            }
        }
        let visible = wrapped.suffix(body)
        var out = "\u{1B}[H\u{1B}[2J"
        let header = "# \(self.circle) — \(self.user) — \(self.state)\(self.more ? " — PgUp: older" : "") — /help"
        out += "\u{1B}[7m" + Self.pad(header, columns) + "\u{1B}[0m\r\n"
        for _ in 0..<(body - visible.count) { out += "\r\n" }
        for line in visible { out += line + "\r\n" }
        let typers = self.typing.keys.filter { $0 != self.user }.sorted()
        out += "\u{1B}[2m" + (typers.isEmpty ? "" : "\(typers.joined(separator: ", ")) \(typers.count == 1 ? "is" : "are") typing…") + "\u{1B}[0m\r\n"
        out += "> " + String(String(decoding: self.input, as: UTF8.self).suffix(max(1, columns - 3)))
        Console.out(out)
    }

    private static func clock(_ milliseconds: Int64) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm"
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    private static func day(_ milliseconds: Int64) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "d MMM yyyy"
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    private static func shorten(_ text: String, _ length: Int) -> String {
        text.count > length ? String(text.prefix(length - 1)) + "…" : text
    }

    private static func wrap(_ line: String, width: Int) -> [String] {
        guard width > 4, line.count > width else { return [line] }
        var result: [String] = []
        var rest = Substring(line)
        while rest.count > width {
            result.append(String(rest.prefix(width)))
            rest = rest.dropFirst(width)
        }
        result.append(String(rest))
        return result
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? String(text.prefix(width)) : text + String(repeating: " ", count: width - text.count)
    }
}

/// Raw mode on the controlling terminal, the alternate screen, and keys as bytes.
final class RawTerminal: @unchecked Sendable {
    // @unchecked: `saved` is written once in enter() before the reader thread starts.
    private var saved = termios()

    func enter() {
        tcgetattr(STDIN_FILENO, &self.saved)
        var raw = self.saved
        raw.c_lflag &= ~tcflag_t(ECHO | ICANON | ISIG | IEXTEN)
        raw.c_iflag &= ~tcflag_t(IXON | ICRNL)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw)
        Console.out("\u{1B}[?1049h")
        // SIGWINCH is handled by a dispatch source (a redraw at the new size).
        signal(SIGWINCH, SIG_IGN)
    }

    func leave() {
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &self.saved)
        Console.out("\u{1B}[?1049l")
    }

    static func size() -> (rows: Int, columns: Int) {
        var size = winsize()
        if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_row > 0 {
            return (Int(size.ws_row), Int(size.ws_col))
        }
        return (24, 80)
    }

    /// Bytes typed, read on a thread of their own.
    func keys() -> AsyncStream<UInt8> {
        AsyncStream { continuation in
            let thread = Thread {
                var buffer = [UInt8](repeating: 0, count: 256)
                while true {
                    let count = read(STDIN_FILENO, &buffer, buffer.count)
                    if count <= 0 { break }
                    for byte in buffer[0..<count] { continuation.yield(byte) }
                }
                continuation.finish()
            }
            thread.start()
        }
    }
}

/// Which presence events are worth a line in the chat: someone coming online after being away,
/// and someone who left and stayed away, not the reconnects of a reload, a network change or a
/// server restart. The server announces every join and leave (docs/PROTOCOL.md, `joined`); this
/// decides from what it has seen, with the time as an input.
///
/// - A `left` is held for `away`: when the user joins again before that, neither is said;
///   otherwise the leave is said then, at the place it happened (`dueLeaves`).
/// - A `joined` is said unless the user's leave is still held, the user was here (or had just
///   left) when this client's connection dropped and comes back less than `away` after this
///   client did, or it comes within `settle` of this client's own (re)join of the circle: after a
///   restart everyone comes back at once, and the client cannot tell who was here before it joined.
struct PresenceNotices {
    struct Timing: Sendable {
        /// After this client's own join, others' joins are taken for reconnects this long.
        var settle: Duration
        /// A leave is said once the user has stayed away this long.
        var away: Duration

        init(settle: Duration = .seconds(30), away: Duration = .seconds(120)) {
            self.settle = settle
            self.away = away
        }
    }

    let timing: Timing
    /// Users known to be here (seen joining or typing).
    private var present: Set<String> = []
    /// Leaves not said yet: when, and after which post.
    private var leaving: [String: (since: ContinuousClock.Instant, afterSeq: Int64)] = [:]
    /// Users who were here when this client's connection dropped, or had just left.
    private var away: [String: ContinuousClock.Instant] = [:]
    private var joinedAt: ContinuousClock.Instant

    init(timing: Timing = .init(), joinedAt: ContinuousClock.Instant) {
        self.timing = timing
        self.joinedAt = joinedAt
    }

    /// This client joined the circle (again, after a reconnect). Who was away when the
    /// connection dropped is counted as away from now: what they did meanwhile went unseen.
    mutating func joinedCircle(at now: ContinuousClock.Instant) {
        self.joinedAt = now
        for user in self.away.keys { self.away[user] = now }
    }

    /// This client's connection dropped: whoever was here counts as away since then, and a held
    /// leave is dropped (the user's return would go unseen).
    mutating func connectionLost(at now: ContinuousClock.Instant) {
        for user in self.present { self.away[user] = now }
        for (user, leave) in self.leaving { self.away[user] = leave.since }
        self.present = []
        self.leaving = [:]
    }

    /// The user did something that shows they are here (typing).
    mutating func seen(_ user: String) {
        self.present.insert(user)
    }

    /// `joined`: whether to say it.
    mutating func joined(_ user: String, at now: ContinuousClock.Instant) -> Bool {
        let wasLeaving = self.leaving.removeValue(forKey: user) != nil
        let awaySince = self.away.removeValue(forKey: user)
        let wasHere = !self.present.insert(user).inserted
        if wasLeaving || wasHere { return false }
        if let awaySince, now - awaySince < self.timing.away { return false }
        return now - self.joinedAt >= self.timing.settle
    }

    /// `left`: held until `dueLeaves` says it, or a join takes it back.
    mutating func left(_ user: String, afterSeq: Int64, at now: ContinuousClock.Instant) {
        self.present.remove(user)
        if self.leaving[user] == nil { self.leaving[user] = (now, afterSeq) }
    }

    /// The leaves to say now (their users stayed away for `away`), oldest first.
    mutating func dueLeaves(at now: ContinuousClock.Instant) -> [(user: String, afterSeq: Int64)] {
        let due = self.leaving.filter { now - $0.value.since >= self.timing.away }.sorted { $0.value.since < $1.value.since }
        for (user, _) in due { self.leaving[user] = nil }
        return due.map { ($0.key, $0.value.afterSeq) }
    }
}
