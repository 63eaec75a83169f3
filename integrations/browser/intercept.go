package browser

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Limits of one tab's requests.
const (
	// maxResourceBytes caps one response body handed to the page.
	maxResourceBytes = 8 << 20
	// maxRequests caps the requests of one tab; later ones fail.
	maxRequests = 256
	// requestTimeout bounds one request, headers and body.
	requestTimeout = 20 * time.Second
)

// newClient is the HTTP client that makes the pages' requests: no proxy
// from the environment, no cookies, redirects handed to the page (which
// requests the next hop, paused and checked like any other).
func newClient(p Policy) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:            p.dialer().DialContext,
			ForceAttemptHTTP2:      true,
			TLSHandshakeTimeout:    10 * time.Second,
			ResponseHeaderTimeout:  15 * time.Second,
			MaxResponseHeaderBytes: 256 << 10,
			MaxIdleConns:           16,
			IdleConnTimeout:        30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       requestTimeout,
	}
}

// localFile is a response served from memory.
type localFile struct {
	body  []byte
	ctype string
}

// interceptor answers every request one tab makes: from local when set
// (and nothing else), else through the policy-checked client.
type interceptor struct {
	client *http.Client
	policy Policy
	local  map[string]localFile

	mu       sync.Mutex
	inflight int
	count    int
	last     time.Time
	refused  []string
}

// maxRefusals caps the refusals a page's result lists.
const maxRefusals = 50

// start subscribes to the tab's paused requests and enables the Fetch
// domain for all of them; it opens the tab.
func (in *interceptor) start(tctx context.Context) error {
	events := chromedp.Events(tctx, fetch.RequestPaused)
	if _, err := chromedp.Call(tctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*"}}}); err != nil {
		return fmt.Errorf("browser: request interception: %w", err)
	}
	go func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			in.mu.Lock()
			in.count++
			over := in.count > maxRequests
			if !over {
				in.inflight++
				in.last = time.Now()
			}
			in.mu.Unlock()
			if over {
				// Refused here, not in a goroutine each: a page that
				// floods requests gets no more goroutines than this.
				in.fail(tctx, ev, fmt.Errorf("%w: more than %d requests", ErrRefused, maxRequests))
				continue
			}
			go in.handle(tctx, ev)
		}
	}()
	return nil
}

func (in *interceptor) handle(tctx context.Context, ev fetch.EventRequestPaused) {
	defer func() {
		in.mu.Lock()
		in.inflight--
		in.last = time.Now()
		in.mu.Unlock()
	}()
	params, err := in.answer(tctx, ev.Request)
	if err != nil {
		in.fail(tctx, ev, err)
		return
	}
	params.RequestID = ev.RequestID
	chromedp.Call(tctx, fetch.FulfillRequest, params)
}

// fail fails a paused request and records why.
func (in *interceptor) fail(tctx context.Context, ev fetch.EventRequestPaused, err error) {
	in.mu.Lock()
	if len(in.refused) < maxRefusals {
		in.refused = append(in.refused, truncate(ev.Request.URL, 200)+": "+cmp.Or(refusal(err), err.Error()))
	}
	in.mu.Unlock()
	chromedp.Call(tctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonAccessDenied})
}

// hopHeaders are not passed on: the client sets or decodes them itself.
var hopHeaders = map[string]bool{
	"accept-encoding": true, "connection": true, "content-length": true, "host": true,
	"content-encoding": true, "transfer-encoding": true, "keep-alive": true, "te": true, "trailer": true, "upgrade": true,
	"proxy-connection": true, "proxy-authorization": true, "proxy-authenticate": true,
}

// answer makes the request and returns the response for the page.
func (in *interceptor) answer(ctx context.Context, req *network.Request) (fetch.FulfillRequestParams, error) {
	if in.local != nil {
		f, ok := in.local[req.URL]
		if !ok || req.Method != http.MethodGet {
			return fetch.FulfillRequestParams{}, fmt.Errorf("%w: the render page loads nothing but itself", ErrRefused)
		}
		return fetch.FulfillRequestParams{ResponseCode: 200, ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: f.ctype}}, Body: f.body}, nil
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fetch.FulfillRequestParams{}, fmt.Errorf("%w: only http and https URLs are fetched", ErrRefused)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if err := in.policy.checkLiteral(u.Hostname(), port); err != nil {
		return fetch.FulfillRequestParams{}, err
	}
	var body io.Reader
	if req.HasPostData {
		var b bytes.Buffer
		for _, e := range req.PostDataEntries {
			b.Write(e.Bytes)
		}
		body = &b
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err != nil {
		return fetch.FulfillRequestParams{}, err
	}
	for k, v := range req.Headers {
		if !hopHeaders[strings.ToLower(k)] {
			hreq.Header.Set(k, fmt.Sprint(v))
		}
	}
	resp, err := in.client.Do(hreq)
	if err != nil {
		return fetch.FulfillRequestParams{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResourceBytes+1))
	if err != nil {
		return fetch.FulfillRequestParams{}, err
	}
	if len(b) > maxResourceBytes {
		return fetch.FulfillRequestParams{}, fmt.Errorf("response larger than %d bytes", maxResourceBytes)
	}
	var hs []*fetch.HeaderEntry
	for k, vs := range resp.Header {
		if hopHeaders[strings.ToLower(k)] {
			continue
		}
		for _, v := range vs {
			hs = append(hs, &fetch.HeaderEntry{Name: k, Value: v})
		}
	}
	return fetch.FulfillRequestParams{ResponseCode: int64(resp.StatusCode), ResponseHeaders: hs, Body: b}, nil
}

// settle waits until no request is in flight and none started for quiet,
// at most max: a page's scripts often fetch right after the load event.
func (in *interceptor) settle(ctx context.Context, quiet, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		in.mu.Lock()
		idle := in.inflight == 0 && time.Since(in.last) >= quiet
		in.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refusals are the requests the policy refused so far.
func (in *interceptor) refusals() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.refused...)
}
