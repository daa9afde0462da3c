import CircleWire
import Foundation

/// Push notifications for apps on Apple devices (docs/API.md, "APNs devices"): the app hands the
/// server its APNs device token, and the server tells the device of mentions and direct messages
/// (by the person's notification levels) while they are away.
///
/// ```swift
/// func application(_ application: UIApplication, didRegisterForRemoteNotificationsWithDeviceToken token: Data) {
///     Task { try await client.registerAPNsToken(Array(token), environment: .production) }
/// }
/// ```
extension CircleClient {
    /// Where a device's token is valid: `production` for App Store and TestFlight builds,
    /// `development` for builds run from Xcode (Apple's sandbox).
    public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable {
        case production
        case development
    }

    /// Registers this device's APNs token for the signed-in person (again after the token
    /// changes; registering the same token again is harmless).
    ///
    /// - Parameters:
    ///   - token: The bytes from `didRegisterForRemoteNotificationsWithDeviceToken` (32 today, at most 100).
    ///   - environment: Which of Apple's services the token belongs to.
    /// - Returns: The subscription as the server lists it (`endpoint` is `apns:<environment>:<hex>`).
    /// - Throws: ``CircleClientError`` `not_found` when the server has APNs off, `bad_request` for a token of the wrong size.
    @discardableResult
    public func registerAPNsToken(_ token: [UInt8], environment: APNsEnvironment = .production) async throws -> HTTPAPI.PushSubscriptionInfo {
        try await self.api.call(
            .POST, HTTPAPI.Path.apnsDevices,
            body: HTTPAPI.APNsRegistration(token: Hex.encode(token), environment: environment.rawValue),
            as: HTTPAPI.PushSubscriptionInfo.self
        )
    }

    /// Removes this device's APNs token (when the person signs out on it or turns notifications off).
    ///
    /// - Throws: ``CircleClientError`` `not_found` when the person has no device with it.
    public func unregisterAPNsToken(_ token: [UInt8]) async throws {
        _ = try await self.api.call(.DELETE, HTTPAPI.Path.apnsDevice(Hex.encode(token)), as: ServerAPI.NoContent.self)
    }
}
