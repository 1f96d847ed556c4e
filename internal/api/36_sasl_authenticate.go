package api

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/sasl"
	"github.com/sushka-io/sushka/internal/server"
)

// SaslAuthenticate: v0-2
//
// Behavior (KIP-152, KIP-368; the exchange is internal/sasl):
// * Steps the connection's exchange with the client's token and answers
//   the server's (SCRAM's server-first and server-final; nothing for
//   PLAIN). Once the exchange ends the connection's principal is
//   User:<name> and it may send any request.
// * A failed authentication (unknown user, wrong password, bad proof or
//   nonce, a malformed message) is SASL_AUTHENTICATION_FAILED with one
//   message for every reason, so the answer does not tell whether the user
//   exists; the reason goes to the broker's log. The answer leaves after
//   connection.failed.authentication.delay (100 ms by default) and the
//   connection is closed; other connections are not held up.
// * Before a SaslHandshake, or after a failure: ILLEGAL_SASL_STATE, and
//   the connection is closed.
// * A bare token after SaslHandshake v0 (RawSASL) is answered with a bare
//   token; a failure closes the connection without an answer (Kafka's
//   behaviour: the v0 protocol has no way to say why).
// * v1+: SessionLifetimeMillis is --connections-max-reauth-ms (0: no
//   limit); the connection must re-authenticate (SaslHandshake +
//   SaslAuthenticate) before then, or its next request after it closes
//   the connection. Clients of v0 get no lifetime, as in Kafka.
// * On a listener without SASL: ILLEGAL_SASL_STATE, the connection stays
//   open.
//
// Version notes:
// * v1: SessionLifetimeMillis (KIP-368); v2: flexible versions

func init() { regKey(36, 0, 2, (*Handler).handleSaslAuthenticate) }

func (h *Handler) handleSaslAuthenticate(ctx context.Context, creq *server.Request, req *kmsg.SASLAuthenticateRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	ex := h.saslExchange(creq)
	if ex == nil {
		resp.ErrorCode = errorCode(sasl.ErrIllegalState)
		resp.ErrorMessage = errMessage(errors.New("SaslAuthenticate on a listener without SASL"))
		return reply(resp)
	}
	challenge, done, err := ex.Step(req.SASLAuthBytes)
	if err != nil {
		h.log.Info("closing connection: SASL authentication failed", "client", creq.Remote, "listener", creq.Session.Listener,
			"mechanism", ex.Mechanism(), "err", err)
		if creq.RawSASL {
			return h.failedAuthentication(ctx, server.Response{None: true})
		}
		resp.ErrorCode = errorCode(err)
		msg := sasl.FailureMessage(ex.Mechanism())
		if errors.Is(err, sasl.ErrIllegalState) {
			msg = err.Error()
		}
		resp.ErrorMessage = &msg
		return h.failedAuthentication(ctx, reply(resp))
	}
	if done {
		var expiry time.Time
		if lifetime := h.cfg.ConnectionsMaxReauth; lifetime > 0 && !creq.RawSASL && req.Version >= 1 {
			expiry = time.Now().Add(lifetime)
			resp.SessionLifetimeMillis = lifetime.Milliseconds()
		}
		reauth := creq.Session.Authenticated()
		creq.Session.Authenticate(server.User(ex.User()), expiry)
		creq.Session.ExpectRawSASLTokens(false)
		h.log.Debug("SASL authentication succeeded", "client", creq.Remote, "listener", creq.Session.Listener,
			"principal", creq.Principal(), "mechanism", ex.Mechanism(), "reauthentication", reauth)
	}
	if creq.RawSASL {
		return server.Response{Frame: &server.Frame{Pieces: []server.Piece{{Bytes: challenge}}}}
	}
	resp.SASLAuthBytes = challenge
	return reply(resp)
}

// saslExchange returns the connection's SASL exchange, or nil on a
// listener without SASL (or a request without a connection).
func (h *Handler) saslExchange(creq *server.Request) *sasl.Exchange {
	if creq.Session == nil || !creq.Session.Protocol.SASL() {
		return nil
	}
	return creq.Session.SASLExchange(func() any { return h.sasl.NewExchange() }).(*sasl.Exchange)
}

// failedAuthentication answers a failed SASL handshake or authentication
// after FailedAuthenticationDelay (Kafka's
// connection.failed.authentication.delay.ms: a client guessing passwords
// gets its answers slowly) and closes the connection. Only this
// connection waits: its reader reads nothing more until the answer.
func (h *Handler) failedAuthentication(ctx context.Context, resp server.Response) server.Response {
	if d := h.cfg.FailedAuthenticationDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	resp.Close = true
	return resp
}
