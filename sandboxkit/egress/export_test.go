package egress

// For the benchmark's bare relay (bench_test.go), which takes a bridge's
// handover and sizes the client's socket as the proxy does.
var ReceiveConn = receiveConn

const ClientSendBuffer = clientSendBuffer
