@testable import CircleServer
import CircleWire
import Testing

/// ``CommitPlan``'s use of the mention rule (``MentionParser``), without a store.
@Suite struct CommitPlanMentionTests {
    /// The plan resolves what the store read, notifies each person once per post, and an edit
    /// adds only whom it newly names.
    @Test func planResolvesAndNotifies() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("den")] = CommitPlan.Circle(lastSeq: 0, owner: "alice", isPrivate: true)
        let posts = [
            NewPost(circle: "den", author: "alice", clientID: "p1", text: "@bob @carol. @nobody @alice", attachment: nil, time: 1),
            NewPost(circle: "den", author: "alice", clientID: "e1", text: "@dave only", attachment: nil, time: 2, change: .edit, target: 1),
            NewPost(circle: "den", author: "alice", clientID: "e2", text: "@bob @dave", attachment: nil, time: 3, change: .edit, target: 1),
        ]
        let wanted = CommitPlan.mentionsToRead(posts, known: known)
        #expect(wanted.candidates.map(\.user) == ["bob", "carol.", "carol", "nobody", "alice", "dave"])
        #expect(wanted.everyone.isEmpty)
        for user in ["bob", "carol", "dave", "alice"] { known.mentionable.insert(MemberKey(circle: "den", user: user)) }
        let plan = CommitPlan(posts: posts, known: known)
        #expect(plan.inserts.map(\.mentions) == [["bob", "dave"], ["dave"], ["bob", "dave"]])
        #expect(plan.mentionWrites.map { "\($0.user)@\($0.post)/\($0.seq)" } == ["bob@1/1", "carol@1/1", "dave@1/2"])
    }

    @Test func everyoneNeedsOwnerOrAdmin() {
        var known = CommitPlan.Known()
        known.circles[BinaryText("den")] = CommitPlan.Circle(lastSeq: 0, owner: "alice", isPrivate: true)
        let byBob = NewPost(circle: "den", author: "bob", clientID: "b1", text: "@everyone", attachment: nil, time: 1)
        #expect(CommitPlan.adminsToRead([byBob], known: known) == ["bob"])
        #expect(CommitPlan.mentionsToRead([byBob], known: known).everyone.isEmpty)
        known.admins.insert(BinaryText("bob"))
        #expect(CommitPlan.mentionsToRead([byBob], known: known).everyone == ["den"])
        known.everyone[BinaryText("den")] = ["alice", "bob", "carol"]
        let plan = CommitPlan(posts: [byBob], known: known)
        #expect(plan.inserts.first?.mentionsEveryone == true)
        #expect(plan.mentionWrites.map(\.user) == ["alice", "carol"])
    }
}
