/// Webhook subscriptions and their deliveries (docs/API.md, "Webhooks"): the outbox that commits
/// fill (``CommitPlan/webhookDeliveries(_:now:)``, in the entries' transaction) and the
/// ``WebhookDispatcher`` of each node empties.
public protocol WebhookStore: Sendable {
    func createWebhook(_ webhook: Webhook) async throws
    /// Every subscription, oldest first.
    func webhooks() async throws -> [Webhook]
    func webhook(id: String) async throws -> Webhook?
    /// Writes a subscription's status, reason and secrets; `false` when there is no such one.
    func updateWebhook(_ webhook: Webhook) async throws -> Bool
    /// Removes a subscription and its deliveries; `false` when there is no such one.
    func deleteWebhook(id: String) async throws -> Bool

    /// A subscription's deliveries, newest first.
    func deliveries(of webhook: String, limit: Int) async throws -> [WebhookDelivery]
    /// Counts of a subscription's deliveries by status.
    func deliveryCounts(of webhook: String) async throws -> [WebhookDeliveryStatus: Int]

    /// Leases queues that are due to `node` until `now + lease`. A queue is one subscription's
    /// pending deliveries of one circle, in `seq` order; it is due when its first delivery is
    /// due and not leased. Of each due queue the first `perQueue` deliveries are leased (they
    /// go in order, one after another), of at most `perWebhook` queues of one subscription and
    /// `queues` in all, none of the subscriptions in `excluding`. A queue leased by another
    /// node is not taken until its lease ends (a node that died mid-delivery leaves it to
    /// another). Returns the deliveries by queue, each queue in `seq` order.
    func claimDeliveries(node: String, now: Int64, lease: Int64, queues: Int, perWebhook: Int, perQueue: Int, excluding: [String]) async throws
        -> [WebhookDelivery]
    /// Extends the lease of deliveries leased to `node` (a long run of attempts to a slow endpoint).
    func renewLeases(_ ids: [String], node: String, until: Int64) async throws
    /// Records the attempts of deliveries leased to `node`, in one transaction: `nil` releases a
    /// delivery untried (it stays pending, as it was). A delivery whose lease went to another
    /// node meanwhile is left alone. ``DeliveryResult/failed(status:error:reason:)`` also
    /// disables the subscription. Returns how many were recorded.
    @discardableResult
    func finishDeliveries(_ results: [(id: String, result: DeliveryResult?)], node: String, at now: Int64) async throws -> Int
    /// Makes a failed delivery pending again, due at `now`; `false` when there is no failed one with that id.
    func retryDelivery(_ id: String, of webhook: String, now: Int64) async throws -> Bool
    /// Deletes deliveries delivered before `time`; returns how many.
    func pruneDeliveries(deliveredBefore time: Int64) async throws -> Int
}
