import ArgumentParser
import CircleServer

/// `circle serve`'s webhook delivery settings (docs/API.md, "Webhooks"). Subscriptions themselves
/// are made by admins (`circle admin webhook`, the admin API).
struct WebhookOptions: ParsableArguments {
    @Option(help: "One delivery attempt (resolve, connect, send, the whole answer) that takes longer fails, e.g. 10s.")
    var webhookTimeout: String = "10s"

    @Option(help: "The first retry of a failed delivery waits this long; each later one twice as long (at most 1h), e.g. 5s.")
    var webhookRetryAfter: String = "5s"

    @Option(help: "A delivery still failing this long after its entry was committed is given up and its webhook disabled, e.g. 24h.")
    var webhookGiveUpAfter: String = "24h"

    func validate() throws {
        var settings = WebhookSettings()
        try self.apply(to: &settings)
    }

    func apply(to settings: inout WebhookSettings) throws {
        func duration(_ text: String, _ flag: String, minimum: Duration) throws -> Duration {
            guard let value = parseDuration(text), value >= minimum else {
                throw ValidationError("--\(flag) must be a duration of at least \(minimum), such as 5s or 10m, not \"\(text)\"")
            }
            return value
        }
        settings.timeout = try duration(self.webhookTimeout, "webhook-timeout", minimum: .milliseconds(100))
        settings.retry.first = try duration(self.webhookRetryAfter, "webhook-retry-after", minimum: .milliseconds(100))
        settings.retry.longest = max(settings.retry.first, settings.retry.longest)
        settings.retry.giveUpAfter = try duration(self.webhookGiveUpAfter, "webhook-give-up-after", minimum: .seconds(1))
    }
}
