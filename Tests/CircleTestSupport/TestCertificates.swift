import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A throwaway certificate authority (test support shared by the test targets) and server certificates, made at test time.
public struct TestCertificates {
    public let caCertificate: NIOSSLCertificate
    private let caKey: P256.Signing.PrivateKey
    private let caName: DistinguishedName

    public init() throws {
        self.caKey = P256.Signing.PrivateKey()
        self.caName = try DistinguishedName { CommonName("Circle Test CA") }
        let now = Date()
        let ca = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(self.caKey.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 3600,
            issuer: self.caName,
            subject: self.caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true))
            },
            issuerPrivateKey: .init(self.caKey)
        )
        self.caCertificate = try Self.nioCertificate(ca)
    }

    /// A server certificate for `names` signed by this CA, or self-signed.
    public func serverIdentity(names: [String], selfSigned: Bool = false) throws -> (certificate: NIOSSLCertificate, key: NIOSSLPrivateKey) {
        let key = P256.Signing.PrivateKey()
        let subject = try DistinguishedName { CommonName(names[0]) }
        let now = Date()
        let certificate = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(key.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 3600,
            issuer: selfSigned ? subject : self.caName,
            subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                SubjectAlternativeNames(
                    names.map { name in
                        if let ip = IPv4Address(name) { return .ipAddress(ASN1OctetStringCompat.bytes(ip)) }
                        return .dnsName(name)
                    }
                )
                try ExtendedKeyUsage([.serverAuth])
            },
            issuerPrivateKey: selfSigned ? .init(key) : .init(self.caKey)
        )
        let privateKey = try NIOSSLPrivateKey(bytes: Array(key.pemRepresentation.utf8), format: .pem)
        return (try Self.nioCertificate(certificate), privateKey)
    }

    public func serverTLS(names: [String], selfSigned: Bool = false) throws -> TLSConfiguration {
        let identity = try self.serverIdentity(names: names, selfSigned: selfSigned)
        return TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(identity.certificate)],
            privateKey: .privateKey(identity.key)
        )
    }

    private static func nioCertificate(_ certificate: Certificate) throws -> NIOSSLCertificate {
        try NIOSSLCertificate(bytes: Array(try certificate.serializeAsPEM().pemString.utf8), format: .pem)
    }
}

struct IPv4Address {
    var bytes: [UInt8]
    init?(_ text: String) {
        let parts = text.split(separator: ".").compactMap { UInt8($0) }
        guard parts.count == 4 else { return nil }
        self.bytes = parts
    }
}

enum ASN1OctetStringCompat {
    static func bytes(_ address: IPv4Address) -> ASN1OctetString {
        ASN1OctetString(contentBytes: ArraySlice(address.bytes))
    }
}
