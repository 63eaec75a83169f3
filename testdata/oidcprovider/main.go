// Command oidcprovider is the OpenID provider of the OIDC tests: zitadel/oidc's
// OP (package op, with the example server's storage and login page), serving
// the clients and users of a JSON file, on 127.0.0.1. It prints
// "issuer=URL" on stdout once it listens.
//
// What the example storage lacks, it adds: a groups claim (scope "groups"),
// claims in the ID token, registered post-logout redirects, and a signing
// key it can rotate. And, for the tests of refusals, a way to make the next
// token response carry a bad ID token, signed by the real key (or by one
// the JWKS does not publish):
//
//	POST /test/rotate                          a new signing key; the old one stays published
//	POST /test/fault {"aud":"x"}               the next ID token's audience
//	POST /test/fault {"expired":true}          the next ID token expired a minute ago
//	POST /test/fault {"unpublished_key":true}  the next ID token signed by a key not in the JWKS
//	POST /test/fault {"nonce":"x"}             the next ID token's nonce
//	GET  /test/events                          what happened: "login NAME", "end_session SUB", "key KID"
//
// It is a test fixture, not a provider to deploy: users' passwords are in
// the file in the clear.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// file is the -config file.
type file struct {
	Clients []struct {
		ID                     string   `json:"id"`
		Secret                 string   `json:"secret"`
		RedirectURIs           []string `json:"redirect_uris"`
		PostLogoutRedirectURIs []string `json:"post_logout_redirect_uris"`
		// Globs (path.Match) for a client whose port is not known in
		// advance: "http://127.0.0.1:*/auth/oidc/corp/callback".
		RedirectURIGlobs       []string `json:"redirect_uri_globs"`
		PostLogoutRedirectGlob []string `json:"post_logout_redirect_uri_globs"`
	} `json:"clients"`
	Users []struct {
		ID       string   `json:"id"`
		Username string   `json:"username"`
		Password string   `json:"password"`
		Email    string   `json:"email"`
		First    string   `json:"first"`
		Last     string   `json:"last"`
		Groups   []string `json:"groups"`
	} `json:"users"`
}

func main() {
	cfgPath := flag.String("config", "", "the clients and users (JSON)")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	host := flag.String("host", "", "host name of the issuer URL (default: the listening address)")
	flag.Parse()
	if err := run(*cfgPath, *listen, *host); err != nil {
		fmt.Fprintln(os.Stderr, "oidcprovider:", err)
		os.Exit(1)
	}
}

func run(cfgPath, listen, host string) error {
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	var cfg file
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", cfgPath, err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	addr := ln.Addr().(*net.TCPAddr)
	if host == "" {
		host = addr.IP.String()
	}
	issuer := fmt.Sprintf("http://%s:%d/", host, addr.Port)

	p := &provider{users: users{}, groups: map[string][]string{}, clients: map[string]client{}}
	for _, u := range cfg.Users {
		p.users[u.ID] = &storage.User{ID: u.ID, Username: u.Username, Password: u.Password, Email: u.Email, EmailVerified: true,
			FirstName: u.First, LastName: u.Last, PreferredLanguage: language.English}
		p.groups[u.ID] = u.Groups
	}
	for _, c := range cfg.Clients {
		storage.RegisterClients(storage.WebClient(c.ID, c.Secret, c.RedirectURIs...))
		p.clients[c.ID] = client{logout: c.PostLogoutRedirectURIs, globs: c.RedirectURIGlobs, logoutGlobs: c.PostLogoutRedirectGlob}
	}
	p.Storage = storage.NewStorage(p.users)
	if err := p.rotate(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	router := exampleop.SetupServer(issuer, p, logger, false)

	mux := http.NewServeMux()
	mux.HandleFunc("POST /test/rotate", func(w http.ResponseWriter, r *http.Request) {
		if err := p.rotate(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("POST /test/fault", func(w http.ResponseWriter, r *http.Request) {
		var f fault
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.fault = &f
		p.mu.Unlock()
	})
	mux.HandleFunc("GET /test/events", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		json.NewEncoder(w).Encode(p.events)
	})
	mux.HandleFunc("POST /oauth/token", p.token(router))
	mux.Handle("/", router)

	fmt.Printf("issuer=%s\n", issuer)
	return (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

// users is the example storage's UserStore over the file's users.
type users map[string]*storage.User

func (u users) GetUserByID(id string) *storage.User { return u[id] }

func (u users) GetUserByUsername(name string) *storage.User {
	for _, x := range u {
		if x.Username == name {
			return x
		}
	}
	return nil
}

func (u users) ExampleClientID() string { return storage.ServiceUserID }

type fault struct {
	Aud            string `json:"aud"`
	Expired        bool   `json:"expired"`
	UnpublishedKey bool   `json:"unpublished_key"`
	Nonce          string `json:"nonce"`
}

// provider is the example storage with groups, rotating keys and faults.
type provider struct {
	*storage.Storage
	users   users
	groups  map[string][]string
	clients map[string]client // what the example's clients lack

	mu     sync.Mutex
	keys   []*key // keys[0] signs; all are published
	fault  *fault
	events []string
}

type key struct {
	id  string
	key *rsa.PrivateKey
}

func (k *key) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *key) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k *key) Use() string                                 { return "sig" }
func (k *key) ID() string                                  { return k.id }

// Key is the private key for signing (op.SigningKey), the public one for
// the JWKS (op.Key): the two interfaces share the method.
type signing struct{ *key }

func (s signing) Key() any { return s.key.key }

type public struct{ *key }

func (p public) Key() any { return &p.key.key.PublicKey }

func newKey() (*key, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 8)
	rand.Read(id)
	return &key{id: fmt.Sprintf("%x", id), key: k}, nil
}

func (p *provider) rotate() error {
	k, err := newKey()
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append([]*key{k}, p.keys...)
	if len(p.keys) > 2 {
		p.keys = p.keys[:2]
	}
	p.events = append(p.events, "key "+k.id)
	return nil
}

func (p *provider) note(e string) {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
}

func (p *provider) SigningKey(context.Context) (op.SigningKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return signing{p.keys[0]}, nil
}

func (p *provider) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (p *provider) KeySet(context.Context) ([]op.Key, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := make([]op.Key, len(p.keys))
	for i, k := range p.keys {
		ks[i] = public{k}
	}
	return ks, nil
}

func (p *provider) CheckUsernamePassword(username, password, id string) error {
	err := p.Storage.CheckUsernamePassword(username, password, id)
	if err == nil {
		p.note("login " + username)
	}
	return err
}

func (p *provider) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := p.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	x := p.clients[id]
	x.Client = c
	return x, nil
}

// SetUserinfoFromRequest adds the groups claim to the ID token.
func (p *provider) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := p.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	if slices.Contains(scopes, "groups") {
		info.AppendClaims("groups", p.groups[req.GetSubject()])
	}
	return nil
}

func (p *provider) TerminateSession(ctx context.Context, userID, clientID string) error {
	p.note("end_session " + userID)
	return p.Storage.TerminateSession(ctx, userID, clientID)
}

// client is a registered client that also allows scope "groups", asserts
// the profile and email claims in the ID token, and has post-logout
// redirects.
type client struct {
	op.Client
	logout, globs, logoutGlobs []string
}

func (c client) RedirectURIGlobs() []string           { return c.globs }
func (c client) PostLogoutRedirectURIGlobs() []string { return c.logoutGlobs }

func (c client) IsScopeAllowed(scope string) bool {
	return scope == "groups" || c.Client.IsScopeAllowed(scope)
}
func (c client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c client) PostLogoutRedirectURIs() []string     { return c.logout }

// token is the token endpoint, with the pending fault (if any) applied to
// the ID token of its answer.
func (p *provider) token(next http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		f := p.fault
		p.fault = nil
		p.mu.Unlock()
		if f == nil {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if rec.Code == http.StatusOK {
			if b, err := p.spoil(body, f); err == nil {
				body = b
			} else {
				slog.Error("fault", "err", err)
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		w.Write(body)
	}
}

// spoil rewrites the id_token of a token response as f says, signed by the
// current key or an unpublished one.
func (p *provider) spoil(body []byte, f *fault) ([]byte, error) {
	var res map[string]any
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, err
	}
	tok, _ := res["id_token"].(string)
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("no id_token in %s", body)
	}
	jws, err := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, err
	}
	var claims map[string]any
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &claims); err != nil {
		return nil, err
	}
	if f.Aud != "" {
		claims["aud"] = []string{f.Aud}
		claims["azp"] = f.Aud
	}
	if f.Nonce != "" {
		claims["nonce"] = f.Nonce
	}
	if f.Expired {
		now := time.Now()
		claims["iat"] = now.Add(-time.Hour).Unix()
		claims["exp"] = now.Add(-time.Minute).Unix()
	}
	p.mu.Lock()
	k := p.keys[0]
	p.mu.Unlock()
	if f.UnpublishedKey {
		published := k.id
		if k, err = newKey(); err != nil {
			return nil, err
		}
		k.id = published // the published key's ID, another key's signature
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k.key, KeyID: k.id}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return nil, err
	}
	signed, err := signer.Sign(payload)
	if err != nil {
		return nil, err
	}
	if res["id_token"], err = signed.CompactSerialize(); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	err = json.NewEncoder(&out).Encode(res)
	return out.Bytes(), err
}
