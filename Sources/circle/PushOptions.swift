import Foundation
import ArgumentParser
import CircleServer

/// `circle serve`'s Web Push settings (docs/OPERATIONS.md, "Push notifications").
struct PushOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Turns Web Push on: how push services reach you, the VAPID \"sub\" (mailto:you@example.com or an https: URL).",
            valueName: "url"
        )
    )
    var pushContact: String?

    @Option(help: "A push still failing this long after its entry was committed is dropped, e.g. 1h.")
    var pushGiveUpAfter: String = "1h"

    @Option(help: "Push only to people with no open connection (on any node) for longer than this, e.g. 30s; 0s: whoever is not connected now.")
    var pushAwayAfter: String = "30s"

    @Option(help: "A device is pushed about one circle at most once per this, e.g. 10s: a burst waits and only its newest post is sent; 0s: every push at once.")
    var pushBurstInterval: String = "10s"

    @Flag(help: "Push endpoints may be http:// (tests with a local push service only; push services use https://).")
    var pushAllowHTTP = false

    @Flag(help: "Push endpoints may be on loopback and private addresses (tests; --allow-private-outbound allows them too).")
    var pushAllowPrivate = false

    @Flag(help: "Pushes carry no text or author: only the circle, seq and kind (the page then shows \"New message\").")
    var pushContentFree = false

    @Option(help: ArgumentHelp("Turns APNs on (with the three below): the .p8 key file Apple gave you, a P-256 private key in PEM.", valueName: "path"))
    var apnsKeyFile: String?

    @Option(help: "The APNs key's id (10 characters, from Apple's developer site).")
    var apnsKeyID: String?

    @Option(help: "Your Apple developer team id (10 characters).")
    var apnsTeamID: String?

    @Option(help: ArgumentHelp("The app's bundle id, APNs' topic, e.g. com.example.chat.", valueName: "bundle-id"))
    var apnsTopic: String?

    @Option(help: ArgumentHelp("Send every APNs push to this https:// origin instead of Apple's (production or sandbox, by the device's environment): tests with a local HTTP/2 server.", valueName: "url"))
    var apnsURL: String?

    @Option(help: ArgumentHelp("An extra root certificate (PEM) trusted for APNs connections: tests with a local server's own CA.", valueName: "path"))
    var apnsCAFile: String?

    func validate() throws {
        var settings = PushSettings()
        try self.apply(to: &settings)
    }

    func apply(to settings: inout PushSettings) throws {
        if let contact = self.pushContact {
            if let problem = PushSettings.contactProblem(contact) { throw ValidationError("--push-contact: \(problem)") }
            settings.contact = contact
        }
        guard let giveUp = parseDuration(self.pushGiveUpAfter), giveUp >= .seconds(1) else {
            throw ValidationError("--push-give-up-after must be a duration of at least 1s, such as 10m or 1h, not \"\(self.pushGiveUpAfter)\"")
        }
        settings.retry.giveUpAfter = giveUp
        guard let away = parseDuration(self.pushAwayAfter), away <= .seconds(86400) else {
            throw ValidationError("--push-away-after must be a duration from 0s to 1d, such as 30s or 5m, not \"\(self.pushAwayAfter)\"")
        }
        settings.awayAfter = away
        guard let burst = parseDuration(self.pushBurstInterval), burst <= .seconds(3600) else {
            throw ValidationError("--push-burst-interval must be a duration from 0s to 1h, such as 10s, not \"\(self.pushBurstInterval)\"")
        }
        settings.burstInterval = burst
        settings.allowHTTP = self.pushAllowHTTP
        settings.allowPrivateAddresses = self.pushAllowPrivate
        settings.contentFree = self.pushContentFree
        settings.apns = try self.apns()
    }

    /// The APNs settings, read and checked: all four of key file, key id, team id and topic, or none.
    private func apns() throws -> APNsSettings? {
        let required = [self.apnsKeyFile, self.apnsKeyID, self.apnsTeamID, self.apnsTopic]
        guard required.contains(where: { $0 != nil }) || self.apnsURL != nil || self.apnsCAFile != nil else { return nil }
        guard let file = self.apnsKeyFile, let keyID = self.apnsKeyID, let teamID = self.apnsTeamID, let topic = self.apnsTopic else {
            throw ValidationError("APNs needs all of --apns-key-file, --apns-key-id, --apns-team-id and --apns-topic")
        }
        func read(_ path: String, _ flag: String) throws -> String {
            guard let data = FileManager.default.contents(atPath: path), data.count <= 65536, let text = String(data: data, encoding: .utf8) else {
                throw ValidationError("\(flag): cannot read \(path) (a PEM file of at most 64 KiB)")
            }
            return text
        }
        let settings = APNsSettings(
            keyPEM: try read(file, "--apns-key-file"), keyID: keyID, teamID: teamID, topic: topic,
            url: self.apnsURL, caPEM: try self.apnsCAFile.map { try read($0, "--apns-ca-file") }
        )
        if let problem = APNsSettings.problem(settings) { throw ValidationError(problem) }
        return settings
    }
}
