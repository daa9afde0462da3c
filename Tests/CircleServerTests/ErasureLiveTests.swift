import CircleTestSupport
import CircleWire
import Crypto
import Foundation
import Logging
import NIOPosix
import PostgresNIO
import SQLiteNIO
import Testing

@testable import CircleServer

/// Erasing a person against a live server, on both stores (docs/OPERATIONS.md, "Erasing a
/// person"): their text and photos leave every table, others' posts stay, a subscriber learns
/// each tombstone live, a reader resuming gets no gap, the audit log records it; unknown → 404,
/// not an admin → 403; a canary member keeps being served throughout.
@Suite("Erasing a person, live", .serialized, .timeLimit(.minutes(3)))
struct ErasureLiveTests {
    static let photo: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array("eve's photo bytes".utf8)

    /// A server (on `kind`) with an admin (ada), accounts eve and bo, a canary; `body` gets ada's token.
    func withServer(_ kind: StoreKind, _ body: (TestServer, Canary, String, any CircleStore) async throws -> Void) async throws {
        let server = TestServer()
        defer { server.remove() }
        var pool: Task<Void, Never>?
        if kind == .postgres {
            var logger = Logger(label: "circle.test.erasure")
            logger.logLevel = .warning
            let store = try PostgresStore(url: try await PostgresTestServer.shared.freshDatabase(), logger: logger)
            pool = Task { await store.run() }
            server.store = store
        }
        defer { pool?.cancel() }
        try await server.start()
        let link = try #require(server.server?.setupLink)
        let setup = try await server.http(
            "POST", HTTPAPI.Path.authSetup, json: #"{"token":"\#(link.split(separator: "#setup=")[1])","name":"ada","password":"correct horse battery"}"#
        )
        #expect(setup.status == 201, "\(setup.body)")
        let store = try #require(server.server?.services.store)
        for name in ["eve", "bo"] { _ = try await store.createAccount(Account(name: name, displayName: name.uppercased(), createdAt: 1), passwordHash: "h", invite: nil, now: 1) }
        let canary = try await Canary(server)
        try await body(server, canary, try await server.token("ada"), store)
        try await canary.check("at the end")
        await canary.close()
        await server.stop()
    }

    /// Every value of every row of every table that contains `needle`, as "table: row".
    func rows(containing needles: [String], in store: any CircleStore, server: TestServer) async throws -> [String] {
        var found: [String] = []
        if let postgres = store as? PostgresStore {
            var tables: [String] = []
            for try await name in try await postgres.client.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'", logger: postgres.logger).decode(String.self) {
                tables.append(name)
            }
            for table in tables {
                let rows = try await postgres.client.query(PostgresQuery(unsafeSQL: "SELECT convert_from(convert_to(t::text, 'UTF8'), 'UTF8') FROM \"\(table)\" t"), logger: postgres.logger)
                for try await text in rows.decode(String.self) {
                    // bytea columns show as hex: look for the needles' hex too.
                    for needle in needles where text.contains(needle) || text.contains(needle.utf8.map { String(format: "%02x", $0) }.joined()) {
                        found.append("\(table): \(text)")
                    }
                }
            }
            return found
        }
        let connection = try await SQLiteConnection.open(
            storage: .file(path: server.dataDirectory + "/circle.sqlite"), threadPool: .singleton, on: MultiThreadedEventLoopGroup.singleton.any()
        )
        let tables = try await connection.query("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap { $0.column("name")?.string }
        for table in tables {
            // The FTS5 shadow tables hold the index's segments (binary); the search checks below cover them.
            if table.hasPrefix("search_words_") || table.hasPrefix("search_trigrams_") || table == "search_words" || table == "search_trigrams" { continue }
            for row in try await connection.query("SELECT * FROM \"\(table)\"") {
                let text = row.columns.map { column -> String in
                    switch column.data {
                    case .text(let value): value
                    case .blob(let buffer): String(buffer: buffer)
                    default: "\(column.data)"
                    }
                }.joined(separator: " | ")
                for needle in needles where text.contains(needle) { found.append("\(table): \(text)") }
            }
        }
        try await connection.close()
        return found
    }

    @Test(arguments: StoreKind.allCases) func erasingAPersonLeavesTombstonesAndNoTrace(_ kind: StoreKind) async throws {
        try await self.withServer(kind) { server, canary, admin, store in
            try await server.createCircle("news", owner: "bo")
            let eve = try await TestClient.connect(server, user: "eve")
            let bo = try await TestClient.connect(server, user: "bo")
            for client in [eve, bo] { #expect(try await client.request { .join("news", id: $0) }.ackSeq != nil) }
            #expect(try await eve.request { .post("eve secret one @bo", to: "news", id: $0) }.ackSeq == 1)
            #expect(try await bo.request { .post("bo keeps this", to: "news", id: $0) }.ackSeq == 2)
            #expect(try await eve.request { .edit(1, in: "news", text: "eve secret edited @bo", id: $0) }.ackSeq == 3)
            #expect(try await eve.request { .react("👍", to: 2, in: "news", id: $0) }.ackSeq == 4)
            #expect(try await eve.request { .post("eve secret two", to: "news", id: $0, replyTo: 2) }.ackSeq == 5)
            #expect(try await bo.request { .react("🎉", to: 5, in: "news", id: $0) }.ackSeq == 6)
            _ = try await bo.request { .read("news", upTo: 6, id: $0) }
            _ = try await eve.request { .read("news", upTo: 6, id: $0) }
            // A photo of eve's in a private circle of hers.
            try await server.createCircle("eves", owner: "eve", isPrivate: true)
            #expect(try await eve.request { .join("eves", id: $0) }.ackSeq != nil)
            let photoID = SHA256.hash(data: Self.photo).map { String(format: "%02x", $0) }.joined()
            try FileManager.default.createDirectory(atPath: server.dataDirectory + "/media", withIntermediateDirectories: true)
            try Data(Self.photo).write(to: URL(fileURLWithPath: server.dataDirectory + "/media/" + photoID))
            _ = try await store.completeUpload(id: "", media: MediaInfo(id: photoID, size: Int64(Self.photo.count), contentType: "image/png", createdAt: 1), uploader: "eve")
            #expect(try await eve.request { .post("eve secret photo", to: "eves", id: $0, attachment: photoID) }.ackSeq != nil)
            await eve.close()

            // Who may: not bo (403); nobody unknown (404).
            let boToken = try await server.token("bo")
            let notAdmin = try await server.http("POST", HTTPAPI.Path.adminUserErase("eve"), token: boToken)
            #expect(notAdmin.status == 403 && notAdmin.body.contains("only admins do this"), "\(notAdmin)")
            #expect(try await server.http("POST", HTTPAPI.Path.adminUserErase("nobody"), token: admin).status == 404)
            #expect(try await server.http("POST", HTTPAPI.Path.adminUserErase("eve") + "?account=shred", token: admin).status == 400)
            let notAdminAudit = try await server.http("GET", HTTPAPI.Path.adminAudit, token: boToken)
            #expect(notAdminAudit.status == 403 && notAdminAudit.body.contains("only admins do this"), "\(notAdminAudit)")
            try await canary.check("before the erase")
            // The scan below finds her text and photo before the erase (it is not vacuous).
            #expect(try await self.rows(containing: ["secret", photoID], in: store, server: server).count >= 3)

            // The canary keeps being served while the erase runs.
            async let erasing = server.http("POST", HTTPAPI.Path.adminUserErase("eve"), token: admin)
            try await canary.check("during the erase")
            let erased = try await erasing
            #expect(erased.status == 200, "\(erased.body)")
            let answer = try JSONDecoder().decode(HTTPAPI.Erased.self, from: Data(erased.body.utf8))
            #expect(answer.posts == 3 && answer.reactions == 1 && answer.media == 1 && answer.uploads == 0 && answer.account == "anonymised", "\(answer)")
            #expect(answer.memberships >= 1, "at least eves, which she owns: \(answer)")
            try await canary.check("after the erase")

            // bo, subscribed all along, learns each change live: the tombstones of 1 and 5, eve's 👍 going.
            var changes: [String] = []
            while changes.count < 3, let message = try await bo.next(timeout: .seconds(10)) {
                if let post = message.post, post.circle == "news", let change = post.change, change == .delete || change == .unreact {
                    changes.append("\(change.rawValue) \(post.target ?? 0)")
                }
            }
            #expect(changes.sorted() == ["delete 1", "delete 5", "unreact 2"], "\(changes)")
            await bo.close()

            // A reader resuming from 0 gets every seq without a gap; bo's post is untouched.
            let entries = try await store.posts(in: "news", after: 0, limit: 100)
            #expect(entries.map(\.seq) == Array(1...Int64(entries.count)))
            #expect(entries.count == 9)
            #expect(entries.first { $0.seq == 2 }?.text == "bo keeps this")
            #expect(entries.filter { $0.author == "eve" && $0.change == nil }.allSatisfy { $0.deleted && $0.text == nil && $0.attachment == nil })
            let history = try await store.history(in: "news", before: nil, after: nil, limit: 10, viewer: "bo")
            #expect(history.first { $0.seq == 2 }?.reactions?.isEmpty ?? true, "eve's 👍 is gone: \(history)")
            #expect(try await store.isMember("eve", of: "eves") == false)
            // Nothing of hers in any table: not her text, not her photo (the photo file too).
            #expect(try await self.rows(containing: ["secret", photoID], in: store, server: server) == [])
            #expect(!FileManager.default.fileExists(atPath: server.dataDirectory + "/media/" + photoID))
            let search = try await server.http("GET", HTTPAPI.Path.search + "?q=secret", token: boToken)
            #expect(search.status == 200 && !search.body.contains("eve secret"), "\(search.body)")
            // The account: anonymised and deactivated, no sessions, no read markers.
            let account = try #require(try await store.account(named: "eve"))
            #expect(account.displayName == "" && account.status == .deactivated)
            #expect(try await store.passwordHash(of: "eve") == nil)
            #expect(try await store.sessions(of: "eve").isEmpty)
            #expect(try await store.circles(visibleTo: "eve", named: "news").first?.readSeq == 0)

            // The audit log, and erasing again changes nothing but adds a line.
            let audit = try await server.http("GET", HTTPAPI.Path.adminAudit, token: admin)
            let log = try JSONDecoder().decode(HTTPAPI.AuditLog.self, from: Data(audit.body.utf8))
            #expect(log.entries.count == 1 && log.entries[0].actor == "ada" && log.entries[0].subject == "eve" && log.entries[0].action == "erase-user", "\(audit.body)")
            let again = try await server.http("POST", HTTPAPI.Path.adminUserErase("eve"), token: admin)
            #expect(again.status == 200 && again.body.contains(#""posts":0"#), "\(again.body)")
            #expect(try await store.posts(in: "news", after: 0, limit: 100).count == 9)
            #expect(try await store.auditLog(before: nil, limit: 10).count == 2)
        }
    }

    @Test("bad input to the erase and audit routes: 400 with a reason, 401 without a token; the canary is served throughout")
    func badInput() async throws {
        try await self.withServer(.sqlite) { server, canary, admin, _ in
            for (path, reason) in [
                (HTTPAPI.Path.adminAudit + "?limit=0", "limit is an integer from 1 to 200"),
                (HTTPAPI.Path.adminAudit + "?limit=201", "limit is an integer from 1 to 200"),
                (HTTPAPI.Path.adminAudit + "?limit=abc", "limit is an integer from 1 to 200"),
                (HTTPAPI.Path.adminAudit + "?before=0", "before is an integer from 1 to 9223372036854775807"),
                (HTTPAPI.Path.adminAudit + "?before=99999999999999999999", "before is an integer from 1 to 9223372036854775807"),
            ] {
                let answer = try await server.http("GET", path, token: admin)
                #expect(answer.status == 400 && answer.body.contains(reason), "\(path): \(answer)")
            }
            let badName = try await server.http("POST", HTTPAPI.Path.adminUsers + "/a%20b/erase", token: admin)
            #expect(badName.status == 400 && badName.body.contains("is not a valid user name"), "\(badName)")
            let longName = try await server.http("POST", HTTPAPI.Path.adminUserErase(String(repeating: "x", count: 5000)), token: admin)
            #expect(longName.status == 400 || longName.status == 414 || longName.status == 431, "\(longName.status)")
            // Without credentials (raw HTTP: URLSession would send the setup's session cookie).
            let anonymous = try await server.rawHTTP("POST \(HTTPAPI.Path.adminUserErase("eve")) HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            #expect(anonymous.hasPrefix("HTTP/1.1 401"), "\(anonymous)")
            let anonymousAudit = try await server.rawHTTP("GET \(HTTPAPI.Path.adminAudit) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            #expect(anonymousAudit.hasPrefix("HTTP/1.1 401"), "\(anonymousAudit)")
            // Nothing was erased by any of them.
            #expect(try await server.http("GET", HTTPAPI.Path.adminAudit, token: admin).body.contains(#""entries":[]"#))
            try await canary.check("after bad erase and audit requests")
        }
    }

    @Test(arguments: StoreKind.allCases) func removingTheAccount(_ kind: StoreKind) async throws {
        try await self.withServer(kind) { server, canary, admin, store in
            try await server.createCircle("news", owner: "bo")
            let eve = try await TestClient.connect(server, user: "eve")
            #expect(try await eve.request { .join("news", id: $0) }.ackSeq != nil)
            #expect(try await eve.request { .post("eve secret", to: "news", id: $0) }.ackSeq == 1)
            let bo = try await TestClient.connect(server, user: "bo")
            #expect(try await bo.request { .join("news", id: $0) }.ackSeq != nil)
            #expect(try await bo.request { .post("bo's", to: "news", id: $0) }.ackSeq == 2)
            #expect(try await eve.request { .react("👍", to: 2, in: "news", id: $0) }.ackSeq == 3)
            await eve.close()
            await bo.close()
            // A read-only circle takes the erase's entries too.
            let readOnly = try await server.http("PUT", HTTPAPI.Path.readOnly("news"), token: admin, json: #"{"readOnly":true}"#)
            #expect(readOnly.status == 200, "\(readOnly)")
            let erased = try await server.http("POST", HTTPAPI.Path.adminUserErase("eve") + "?account=remove", token: admin)
            #expect(erased.status == 200 && erased.body.contains(#""account":"removed""#) && erased.body.contains(#""reactions":1"#), "\(erased.body)")
            #expect(try await store.account(named: "eve") == nil)
            let entries = try await store.posts(in: "news", after: 0, limit: 10)
            #expect(entries.map(\.deleted) == [true, false, false, false, false], "\(entries)")
            #expect(entries.compactMap(\.change) == [.react, .delete, .unreact])
            // An admin cannot erase themselves.
            #expect(try await server.http("POST", HTTPAPI.Path.adminUserErase("ada"), token: admin).status == 400)
            try await canary.check("after removing an account")
        }
    }
}
