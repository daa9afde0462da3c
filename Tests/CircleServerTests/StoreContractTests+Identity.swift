import CircleTestSupport
import CircleWire
import Foundation
import Testing

@testable import CircleServer

/// ``IdentityStore``'s guarantees, on both stores.
extension StoreContractTests {
    @Test(arguments: StoreKind.allCases) func accountsAndInvites(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            #expect(try await store.accountCount() == 0)
            let admin = try await store.createAccount(Account(name: "ada", displayName: "Ada L.", role: .admin, createdAt: 1), passwordHash: "h1", invite: nil, now: 1)
            #expect(admin.role == .admin)
            #expect(try await store.accountCount() == 1)
            await #expect(throws: StoreError.self) {
                _ = try await store.createAccount(Account(name: "ada", createdAt: 2), passwordHash: nil, invite: nil, now: 2)
            }
            #expect(try await store.passwordHash(of: "ada") == "h1")
            #expect(try await store.passwordHash(of: "nobody") == nil)

            _ = try await store.createCircle(name: "general", owner: "ada", isPrivate: false, createdAt: 1)
            _ = try await store.createCircle(name: "staff", owner: "ada", isPrivate: true, createdAt: 1)
            let invite = Invite(id: "i1", tokenHash: "t1", createdBy: "ada", createdAt: 10, expiresAt: 1000, maxUses: 2, circles: ["general", "staff", "gone"])
            try await store.createInvite(invite)
            #expect(try await store.invite(tokenHash: "t1")?.circles == ["general", "staff", "gone"])

            // Two uses, then used up; the circles that exist are joined.
            _ = try await store.createAccount(Account(name: "bo", createdAt: 20), passwordHash: "h2", invite: "t1", now: 20)
            #expect(try await store.isMember("bo", of: "staff"))
            #expect(try await store.isMember("bo", of: "general"))
            _ = try await store.createAccount(Account(name: "cy", createdAt: 21), passwordHash: "h3", invite: "t1", now: 21)
            let usedUp = await #expect(throws: StoreError.self) {
                _ = try await store.createAccount(Account(name: "di", createdAt: 22), passwordHash: nil, invite: "t1", now: 22)
            }
            #expect(usedUp?.code == .notFound)
            #expect(try await store.account(named: "di") == nil)
            #expect(try await store.invite(tokenHash: "t1")?.uses == 2)

            // A name conflict does not take a use of the invite.
            try await store.createInvite(Invite(id: "i2", tokenHash: "t2", createdBy: "ada", createdAt: 10, expiresAt: 1000, maxUses: 1))
            let taken = await #expect(throws: StoreError.self) {
                _ = try await store.createAccount(Account(name: "bo", createdAt: 23), passwordHash: nil, invite: "t2", now: 23)
            }
            #expect(taken?.code == .conflict)
            #expect(try await store.invite(tokenHash: "t2")?.uses == 0)
            // Expired, and revoked.
            await #expect(throws: StoreError.self) {
                _ = try await store.createAccount(Account(name: "ed", createdAt: 1000), passwordHash: nil, invite: "t2", now: 1000)
            }
            #expect(try await store.revokeInvite(id: "i2"))
            #expect(try await !store.revokeInvite(id: "nope"))
            await #expect(throws: StoreError.self) {
                _ = try await store.createAccount(Account(name: "ed", createdAt: 30), passwordHash: nil, invite: "t2", now: 30)
            }
            #expect(try await store.invites().map(\.id).sorted() == ["i1", "i2"])

            let banned = try await store.updateAccount("bo", AccountChange(displayName: "Bo", role: .bot, status: .banned))
            #expect(banned.status == .banned && banned.role == .bot && banned.displayName == "Bo")
            let photo = try await store.updateAccount("bo", AccountChange(avatar: .some("abc")))
            #expect(photo.avatar == "abc" && photo.status == .banned)
            #expect(try await store.updateAccount("bo", AccountChange(avatar: .some(nil))).avatar == nil)
            await #expect(throws: StoreError.self) { _ = try await store.updateAccount("nobody", AccountChange(role: .admin)) }
            #expect(try await store.accounts().map(\.name) == ["ada", "bo", "cy"])
        }
    }

    @Test(arguments: StoreKind.allCases) func sessionsAndTheAccountLog(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createAccount(Account(name: "ada", createdAt: 1), passwordHash: nil, invite: nil, now: 1)
            func session(_ id: String, kind: SessionKind, expires: Int64 = 10_000, used: Int64 = 100) -> StoredSession {
                StoredSession(
                    id: id, tokenHash: "hash-\(id)", user: "ada", kind: kind, label: "Firefox on Linux", address: "127.0.0.1",
                    csrf: "c-\(id)", createdAt: 100, lastUsedAt: used, expiresAt: expires
                )
            }
            try await store.createSession(session("s1", kind: .page))
            try await store.createSession(session("s2", kind: .device))
            try await store.createSession(session("s3", kind: .personal))
            try await store.createSession(session("old", kind: .page, expires: 150))
            try await store.createSession(session("idle", kind: .page, used: 5))
            #expect(try await store.session(tokenHash: "hash-s1", now: 200)?.csrf == "c-s1")
            #expect(try await store.session(tokenHash: "hash-old", now: 200) == nil, "past its absolute end")
            #expect(try await store.session(tokenHash: "nope", now: 200) == nil)
            try await store.touchSession(id: "s1", at: 500)
            #expect(try await store.session(tokenHash: "hash-s1", now: 600)?.lastUsedAt == 500)
            #expect(try await store.account(named: "ada")?.lastSeenAt == 500)
            #expect(try await store.sessions(of: "ada").first?.id == "s1", "newest use first")

            // Expired and idle page sessions go; devices and personal tokens are not idle-limited.
            #expect(try await store.deleteExpiredSessions(now: 200, idleBefore: 50) == 2)
            #expect(Set(try await store.sessions(of: "ada").map(\.id)) == ["s1", "s2", "s3"])

            let shared = store as? any SharedCircleStore
            let cursor = try await shared?.accountEvents(after: nil).newest
            #expect(try await store.deleteSessions(of: "ada", id: "s2", kind: nil) == ["s2"])
            #expect(try await store.deleteSessions(of: "ada", id: nil, kind: .page) == ["s1"])
            #expect(try await store.deleteSessions(of: "someone", id: nil, kind: nil).isEmpty)
            _ = try await store.updateAccount("ada", AccountChange(status: .deactivated))
            #expect(try await store.sessions(of: "ada").isEmpty, "a disabled account keeps no session")
            if let shared, let cursor {
                let log = try await shared.accountEvents(after: cursor)
                #expect(log.events == [AccountEvent(user: "ada", session: "s2"), AccountEvent(user: "ada", session: "s1"), AccountEvent(user: "ada", session: nil)])
                #expect(try await shared.accountEvents(after: log.newest).events.isEmpty)
            }
        }
    }

    @Test(arguments: StoreKind.allCases) func passkeysChallengesAndThrottle(_ kind: StoreKind) async throws {
        try await self.withStore(kind) { store in
            _ = try await store.createAccount(Account(name: "ada", createdAt: 1), passwordHash: nil, invite: nil, now: 1)
            let key = StoredPasskey(id: "cred-1", user: "ada", publicKey: [0xA5, 0x01, 0x02, 0x00, 0xFF], algorithm: -7, signCount: 0, name: "laptop", createdAt: 5)
            try await store.addPasskey(key)
            await #expect(throws: StoreError.self) { try await store.addPasskey(key) }
            #expect(try await store.passkey(id: "cred-1") == key)
            try await store.usePasskey(id: "cred-1", signCount: 7, at: 9)
            #expect(try await store.passkeys(of: "ada").map(\.signCount) == [7])
            #expect(try await !store.deletePasskey(id: "cred-1", of: "someone-else"))
            #expect(try await store.deletePasskey(id: "cred-1", of: "ada"))
            #expect(try await store.passkeys(of: "ada").isEmpty)

            let challenge = StoredChallenge(id: "ch1", purpose: "passkey-signin", user: nil, challenge: Array(repeating: 7, count: 32), expiresAt: 1000)
            #expect(try await store.createChallenge(challenge, now: 0, outstandingLimit: 10))
            #expect(try await store.takeChallenge(id: "ch1", now: 500) == challenge)
            #expect(try await store.takeChallenge(id: "ch1", now: 500) == nil, "a challenge is used once")
            #expect(try await store.createChallenge(StoredChallenge(id: "ch2", purpose: "device", user: "ada", challenge: [1], expiresAt: 1000), now: 0, outstandingLimit: 10))
            #expect(try await store.takeChallenge(id: "ch2", now: 1000) == nil, "expired")
            // A device code: read in place, approved once by one user.
            #expect(try await store.createChallenge(StoredChallenge(id: "ch3", purpose: "device", user: nil, challenge: [2], expiresAt: 1000), now: 0, outstandingLimit: 10))
            #expect(try await store.challenge(id: "ch3", now: 10)?.user == nil)
            #expect(try await store.approveChallenge(id: "ch3", user: "ada", now: 10))
            #expect(try await !store.approveChallenge(id: "ch3", user: "mallory", now: 11))
            #expect(try await store.challenge(id: "ch3", now: 12)?.user == "ada")
            #expect(try await store.challenge(id: "ch3", now: 1000) == nil, "expired")
            #expect(try await !store.approveChallenge(id: "nope", user: "ada", now: 10))
            // The ceremonies in flight are capped; expired ones leave as new ones come.
            #expect(try await store.createChallenge(StoredChallenge(id: "ch4", purpose: "signin", user: nil, challenge: [3], expiresAt: 2000), now: 10, outstandingLimit: 2))
            #expect(
                try await !store.createChallenge(StoredChallenge(id: "ch5", purpose: "signin", user: nil, challenge: [4], expiresAt: 2000), now: 10, outstandingLimit: 2),
                "ch3 and ch4 are in flight"
            )
            #expect(try await store.challenge(id: "ch5", now: 10) == nil, "a refused challenge is not stored")
            #expect(try await store.createChallenge(StoredChallenge(id: "ch5", purpose: "signin", user: nil, challenge: [4], expiresAt: 2000), now: 1000, outstandingLimit: 2))
            #expect(try await store.challenge(id: "ch3", now: 0) == nil, "expired at 1000, so deleted by the insert at 1000")

            try await store.recordSignInFailure(keys: ["user:ada", "address:10.0.0.1"], at: 100)
            try await store.recordSignInFailure(keys: ["user:ada"], at: 200)
            let failures = try await store.signInFailures(keys: ["user:ada", "address:10.0.0.1", "user:bo"])
            #expect(failures["user:ada"] == SignInFailures(count: 2, last: 200))
            #expect(failures["address:10.0.0.1"] == SignInFailures(count: 1, last: 100))
            #expect(failures["user:bo"] == nil)
            try await store.clearSignInFailures(keys: ["user:ada"])
            #expect(try await store.signInFailures(keys: ["user:ada"]).isEmpty)
        }
    }
}

@Suite("Sign-in throttle")
struct SignInThrottleTests {
    @Test("free failures, then waits that double from the last failure, up to the longest")
    func waits() {
        let throttle = SignInThrottle(freeFailures: 5, longestWait: .seconds(900))
        #expect(throttle.wait(after: nil, now: 0) == nil)
        #expect(throttle.wait(after: SignInFailures(count: 4, last: 1000), now: 1000) == nil)
        #expect(throttle.wait(after: SignInFailures(count: 5, last: 1000), now: 1000) == .seconds(1))
        #expect(throttle.wait(after: SignInFailures(count: 5, last: 1000), now: 2000) == nil)
        #expect(throttle.wait(after: SignInFailures(count: 8, last: 1000), now: 3000) == .seconds(6))
        #expect(throttle.wait(after: SignInFailures(count: 40, last: 0), now: 0) == .seconds(900))
        #expect(throttle.wait(after: SignInFailures(count: 40, last: 0), now: 900_000) == nil)
    }
}
