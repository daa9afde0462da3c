import CircleWire
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Erasing a person (docs/OPERATIONS.md, "Erasing a person"): what an admin's
/// `POST /v1/admin/users/{name}/erase` does, in this order, each step safe to run again when a
/// previous run stopped half-way:
///
/// 1. the account is deactivated and every connection, session and passkey of theirs ends, and
///    the API keys acting as them are revoked: nothing new comes from them meanwhile;
/// 2. each of their posts that is not deleted gets a `delete` entry, committed through the
///    ``PostCommitter`` like a moderator's delete (its author is the admin), so every subscriber on
///    every node learns it: the post becomes a tombstone (text and photo gone, the edits' text
///    too, its reactions gone), the entries and their seqs stay;
/// 3. each reaction of theirs still standing gets an `unreact` entry (by them), so readers see it go;
/// 4. they leave every circle they are a member of;
/// 5. in one transaction (``ErasureStore/eraseAccountData(of:removeAccount:audit:)``): their read
///    markers, notification levels, mention rows, uploads and uploader records go, the media
///    they uploaded that no post has any more go, the account is anonymised (or removed), and
///    the audit log records who did it; then the media and upload files are deleted.
struct Erasure: Sendable {
    let services: ServerServices

    var store: any CircleStore { self.services.store }

    /// Entries read and committed at a time.
    static let batchSize = 200

    /// Erases `user` as `admin`. Throws `APIError` 404 for an unknown account, 400 for erasing oneself.
    func erase(_ user: String, by admin: String, removeAccount: Bool) async throws -> HTTPAPI.Erased {
        guard try await self.store.account(named: user) != nil else { throw APIError(.notFound, .notFound, "no account \"\(user.prefix(64))\"") }
        guard user != admin else { throw APIError(.badRequest, .badRequest, "an admin cannot erase themselves; ask another admin") }
        // 1. Nothing new from them.
        let deactivated = try await self.store.updateAccount(user, AccountChange(status: .deactivated))
        self.services.identity.accountChanged(deactivated)
        _ = try await self.store.deleteSessions(of: user, id: nil, kind: nil)
        try await self.store.logDisconnect(of: user, at: Identity.now)
        self.services.hub.endConnections(of: user, session: nil)
        for passkey in try await self.store.passkeys(of: user) { _ = try await self.store.deletePasskey(id: passkey.id, of: user) }
        for key in try await self.store.apiKeys() where key.bot == user && key.revokedAt == nil {
            _ = try await self.store.revokeAPIKey(id: key.id, at: Identity.now)
        }
        // 2. Their posts become tombstones.
        var posts = 0
        while true {
            let batch = try await self.store.livePosts(by: user, limit: Self.batchSize)
            guard !batch.isEmpty else { break }
            let outcomes = try await self.commit(
                batch.map {
                    NewPost(
                        circle: $0.circle, author: admin, clientID: "erase:\(user):\($0.seq)", text: nil, attachment: nil, time: Identity.now, change: .delete,
                        target: $0.seq, moderated: true, byAPIKey: true
                    )
                }
            )
            let stored = outcomes.filter { if case .stored = $0 { return true } else { return false } }.count
            guard stored > 0 || outcomes.contains(where: { if case .duplicate = $0 { return true } else { return false } }) else {
                throw APIError(.internalServerError, .unavailable, "erasing \(user): a delete was refused (\(outcomes.first.map { "\($0)" } ?? "none"))")
            }
            posts += stored
        }
        // 3. Their reactions go, as entries readers see.
        var reactions = 0
        while true {
            let batch = try await self.store.reactions(by: user, limit: Self.batchSize)
            guard !batch.isEmpty else { break }
            let outcomes = try await self.commit(
                batch.map {
                    NewPost(
                        circle: $0.circle, author: user, clientID: "erase:\(user):\($0.post):\($0.emoji)", text: nil, attachment: nil, time: Identity.now,
                        change: .unreact, target: $0.post, emoji: $0.emoji,
                        // Written for the server, not by the person: a read-only circle takes it.
                        byAPIKey: true
                    )
                }
            )
            let stored = outcomes.filter { if case .stored = $0 { return true } else { return false } }.count
            guard stored > 0 else { throw APIError(.internalServerError, .unavailable, "erasing \(user): an unreact was refused") }
            reactions += stored
        }
        // 4. Their memberships.
        var memberships = 0
        for circle in try await self.store.circles(visibleTo: user) {
            guard try await self.store.isMember(user, of: circle.name) else { continue }
            try await self.store.removeMember(user, from: circle.name)
            self.services.hub.revoke(user: user, from: circle.name)
            memberships += 1
        }
        // Their push subscriptions, with the pushes queued for them.
        let subscriptions = try await self.store.deletePushSubscriptions(user: user)
        // 5. The rest, with the audit log entry, in one transaction; then the files.
        let account = removeAccount ? "removed" : "anonymised"
        let audit = AuditEntry(
            time: Identity.now, actor: admin, action: "erase-user", subject: user,
            detail: "posts=\(posts) reactions=\(reactions) memberships=\(memberships) pushSubscriptions=\(subscriptions) account=\(account)"
        )
        let files = try await self.store.eraseAccountData(of: user, removeAccount: removeAccount, audit: audit)
        let media = MediaFiles(dataDirectory: self.services.configuration.dataDirectory)
        for id in files.media { _ = unlink(media.mediaPath(id)) }
        for id in files.uploads { _ = unlink(media.uploadPath(id)) }
        if let account = try await self.store.account(named: user) { self.services.identity.accountChanged(account) }
        self.services.logger.notice(
            "an admin erased a person's data",
            metadata: ["circle.admin": "\(admin)", "circle.user": "\(user)", "circle.erase": "\(audit.detail)"]
        )
        return HTTPAPI.Erased(user: user, posts: posts, reactions: reactions, memberships: memberships, media: files.media.count, uploads: files.uploads.count, account: account)
    }

    private func commit(_ entries: [NewPost]) async throws -> [PostOutcome] {
        var outcomes: [PostOutcome] = []
        for entry in entries {
            let committer = self.services.committer
            let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<PostOutcome, any Error>, Never>) in
                committer.submit(entry) { continuation.resume(returning: $0) }
            }
            outcomes.append(try result.get())
        }
        return outcomes
    }
}
