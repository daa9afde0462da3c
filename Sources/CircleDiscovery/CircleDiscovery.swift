// LAN discovery of Circle servers (UDP multicast on NIO's DatagramBootstrap) is not built yet.
// The target exists so the package keeps the layout of the design; it exports nothing yet.
