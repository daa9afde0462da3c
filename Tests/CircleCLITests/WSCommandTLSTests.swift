import Foundation
import NIOSSL
import Testing

/// A test CA and a server certificate it signed for `localhost` and `127.0.0.1` (P-256, valid
/// 2020–2120), made once with openssl and kept here so the tests need no certificate tooling.
enum TestPKI {
    static let caPEM = """
        -----BEGIN CERTIFICATE-----
        MIIBbTCCARSgAwIBAgICEAAwCgYIKoZIzj0EAwIwHTEbMBkGA1UEAwwSQ2lyY2xl
        IENMSSBUZXN0IENBMCAXDTIwMDEwMTAwMDAwMFoYDzIxMjAwMTAxMDAwMDAwWjAd
        MRswGQYDVQQDDBJDaXJjbGUgQ0xJIFRlc3QgQ0EwWTATBgcqhkjOPQIBBggqhkjO
        PQMBBwNCAAQnq9iUfQZ40bfG3oTz/be4PsXLXmXDJ1ES4Wy5sSvZ2HRgF6RsKgp5
        yMvMnlDBHzoQYFi57G5Jn1N13BonS6VDo0IwQDAPBgNVHRMBAf8EBTADAQH/MA4G
        A1UdDwEB/wQEAwICBDAdBgNVHQ4EFgQUDMjlRXdKMOtoyoUyFice8bbPfKIwCgYI
        KoZIzj0EAwIDRwAwRAIgcFw7+cy+IFE4fflNGoHFLvWMYyZmKOyQ/IPezyKsntsC
        IDoe/NYoLxelz3uQc2kKKojlXmPG7g6sOgps102REVl5
        -----END CERTIFICATE-----
        """

    static let serverCertificatePEM = """
        -----BEGIN CERTIFICATE-----
        MIIBtjCCAVygAwIBAgICEAEwCgYIKoZIzj0EAwIwHTEbMBkGA1UEAwwSQ2lyY2xl
        IENMSSBUZXN0IENBMCAXDTIwMDEwMTAwMDAwMFoYDzIxMjAwMTAxMDAwMDAwWjAU
        MRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAATB
        hGB3HcqsmKQiWm7MtU8/StqAmHrgmfbAXcyONzPNlsMWAARXp2WLor+zEO+oktAy
        LwFkKS4SmMNgEKt866Sio4GSMIGPMAwGA1UdEwEB/wQCMAAwDgYDVR0PAQH/BAQD
        AgeAMBMGA1UdJQQMMAoGCCsGAQUFBwMBMBoGA1UdEQQTMBGCCWxvY2FsaG9zdIcE
        fwAAATAfBgNVHSMEGDAWgBQMyOVFd0ow62jKhTIWJx7xts98ojAdBgNVHQ4EFgQU
        n4kQ31eKAz+U5k4N/yd7wyKnd7QwCgYIKoZIzj0EAwIDSAAwRQIgKCO6DPPNxpuo
        KGmCieWZWNDGxa0szaWo6DzFY4FGpEECIQD+UDcloTvP7h68Hswo0aNjia1IAmS/
        fznSsJRdq6WnmQ==
        -----END CERTIFICATE-----
        """

    static let serverKeyPEM = """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgnGz1FuovCZ2BJuR9
        81kslWRY9DoyVQ1S9G0cabvc41ShRANCAATBhGB3HcqsmKQiWm7MtU8/StqAmHrg
        mfbAXcyONzPNlsMWAARXp2WLor+zEO+oktAyLwFkKS4SmMNgEKt866Si
        -----END PRIVATE KEY-----
        """

    /// The server key's pin: base64 of the SHA-256 of its SubjectPublicKeyInfo.
    static let serverPin = "sha256/8t3PhO7Dxtj7Z8g3lKGHNiXvnmhZwPnXqUAUdC/SjBk="

    static func serverTLS() throws -> TLSConfiguration {
        TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(Self.serverCertificatePEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(Self.serverKeyPEM.utf8), format: .pem))
        )
    }

    /// Writes the CA certificate to a temporary file and returns its path.
    static func writeCAFile() throws -> String {
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("circle-cli-test-ca-\(UUID().uuidString).pem").path
        try Data(Self.caPEM.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }
}

extension WSCommandTests {
    @Test("wss: --insecure-localhost accepts the server's certificate on localhost")
    func insecureLocalhost() async throws {
        try await withServer(.init(tls: try TestPKI.serverTLS())) { url in
            let url = url.replacingOccurrences(of: "ws://127.0.0.1", with: "wss://localhost")
            let process = try CircleProcess(["ws", url, "--insecure-localhost", "-x", "over tls", "--count", "1", "--wait", "60"])
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(process.stdoutLines == ["over tls"])
        }
    }

    @Test("wss: an untrusted certificate exits 2 with a TLS message")
    func untrustedCertificate() async throws {
        try await withServer(.init(tls: try TestPKI.serverTLS())) { url in
            let url = url.replacingOccurrences(of: "ws://", with: "wss://")
            let process = try CircleProcess(["ws", url])
            let status = try await process.waitForExit()
            #expect(status == 2)
            #expect(
                process.stderr.hasPrefix("circle ws: cannot connect to \(url): the server's certificate is not trusted"),
                "stderr: \(process.stderr)"
            )
        }
    }

    @Test("wss: --ca trusts a private CA, and --pin checks the key", arguments: [false, true])
    func privateCA(withPin: Bool) async throws {
        let caFile = try TestPKI.writeCAFile()
        defer { try? FileManager.default.removeItem(atPath: caFile) }
        try await withServer(.init(tls: try TestPKI.serverTLS())) { url in
            let url = url.replacingOccurrences(of: "ws://", with: "wss://")
            let pin = withPin ? ["--pin", TestPKI.serverPin] : []
            let process = try CircleProcess(["ws", url, "--ca", caFile, "-x", "trusted", "--count", "1", "--wait", "60"] + pin)
            let status = try await process.waitForExit()
            #expect(status == 0, "stderr: \(process.stderr)")
            #expect(process.stdoutLines == ["trusted"])
        }
    }

    @Test("wss: a certificate whose key matches no --pin exits 2")
    func pinMismatch() async throws {
        let caFile = try TestPKI.writeCAFile()
        defer { try? FileManager.default.removeItem(atPath: caFile) }
        try await withServer(.init(tls: try TestPKI.serverTLS())) { url in
            let url = url.replacingOccurrences(of: "ws://", with: "wss://")
            let otherPin = String(repeating: "ab", count: 32)
            let process = try CircleProcess(["ws", url, "--ca", caFile, "--pin", otherPin])
            let status = try await process.waitForExit()
            #expect(status == 2)
            #expect(process.stderr.contains("matches none of the 1 pinned keys"), "stderr: \(process.stderr)")
        }
    }

    @Test("an unreadable --ca file exits 5 (a local file); a malformed --pin is a usage error")
    func badTLSOptions() async throws {
        let missing = try CircleProcess(["ws", "wss://127.0.0.1:1/", "--ca", "/nonexistent/ca.pem"])
        #expect(try await missing.waitForExit() == 5)
        #expect(missing.stderr.contains("cannot read certificate authorities from /nonexistent/ca.pem"), "stderr: \(missing.stderr)")

        let malformed = try CircleProcess(["ws", "wss://127.0.0.1:1/", "--pin", "not-a-pin"])
        #expect(try await malformed.waitForExit() == 64)
        #expect(malformed.stderr.contains("--pin \"not-a-pin\" is not a SHA-256 digest"), "stderr: \(malformed.stderr)")
    }
}
