@testable import CircleServer
import CircleWire
import Testing

/// The visibility rule (no such circle / private and not a member) and its messages, without a
/// store; the routes, the session and search use it (their own tests cover them end to end).
@Suite("Circle visibility rule")
struct CircleVisibilityTests {
    static let open = CircleInfo(name: "general", owner: "alice", isPrivate: false, createdAt: 0, lastSeq: 3)
    static let closed = CircleInfo(name: "team", owner: "alice", isPrivate: true, createdAt: 0, lastSeq: 5)

    struct Asked: Error {}

    @Test func noSuchCircleIsNotFound() throws {
        let visibility = try CircleVisibility.decide(name: "nope", circle: nil, isMember: { throw Asked() })
        #expect(visibility == .noSuchCircle(name: "nope"))
        #expect(visibility.circle == nil)
        #expect(visibility.refusal() == CircleVisibility.Refusal(code: .notFound, message: "no circle \"nope\""))
    }

    @Test func publicCircleIsVisibleWithoutAskingForMembership() throws {
        let visibility = try CircleVisibility.decide(name: "general", circle: Self.open, isMember: { throw Asked() })
        #expect(visibility == .visible(Self.open))
        #expect(visibility.refusal() == nil)
        #expect(visibility.circle == Self.open)
    }

    @Test func privateCircleNeedsMembership() throws {
        let member = CircleVisibility.decide(name: "team", circle: Self.closed, isMember: { true })
        #expect(member == .visible(Self.closed))
        #expect(member.refusal() == nil)
        let outsider = CircleVisibility.decide(name: "team", circle: Self.closed, isMember: { false })
        #expect(outsider == .notMember(Self.closed))
        #expect(outsider.circle == nil)
        #expect(outsider.refusal() == CircleVisibility.Refusal(code: .forbidden, message: "\"team\" is private and you are not a member"))
        #expect(outsider.refusal(naming: "mallory")?.message == "\"team\" is private and mallory is not a member")
    }

    @Test func messagesCutLongNamesAndMapToHTTP() {
        let long = String(repeating: "x", count: 300)
        #expect(CircleVisibility.Refusal.noSuchCircle(long).message == "no circle \"\(String(repeating: "x", count: 64))\"")
        #expect(APIError(.noSuchCircle("nope")).status == .notFound)
        #expect(APIError(.notMember("team")).status == .forbidden)
        #expect(StoreError.noSuchCircle("nope") == StoreError(.notFound, "no circle \"nope\""))
    }
}
