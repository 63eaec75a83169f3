package browser

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"golang.org/x/sync/semaphore"
)

// Limits of one tab's requests.
const (
	// maxResourceBytes caps one response body handed to the page.
	maxResourceBytes = 8 << 20
	// maxRequests caps the requests of one tab; later ones fail.
	maxRequests = 256
	// requestTimeout bounds one request's headers, and then its body
	// (not the wait for room to hold it between the two).
	requestTimeout = 20 * time.Second
	// maxCallBytes caps the response bytes one call's requests hold at
	// once (with Options.MaxInflight over all calls).
	maxCallBytes = 3 * maxResourceBytes
)

// A budget bounds the bytes of responses held at once: a request takes
// its body's size (its Content-Length, else the most it may be) before it
// reads the body, gives back what the body did not use once read, and the
// rest once the page has it. Taken whole and in one order (the call's,
// then the Browser's), budgets cannot deadlock.
type budget struct {
	sem  *semaphore.Weighted
	size int64
}

func newBudget(n int64) budget { return budget{semaphore.NewWeighted(n), n} }

// newClient is the HTTP client that makes the pages' requests: no proxy
// from the environment, no cookies, redirects handed to the page (which
// requests the next hop, paused and checked like any other). hosts maps
// names to addresses (tests).
func newClient(p Policy, hosts map[string]string) *http.Client {
	dial := p.dialer().DialContext
	if hosts != nil {
		next := dial
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if h, port, err := net.SplitHostPort(addr); err == nil && hosts[h] != "" {
				addr = net.JoinHostPort(hosts[h], port)
			}
			return next(ctx, network, addr)
		}
	}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:            dial,
			ForceAttemptHTTP2:      true,
			TLSHandshakeTimeout:    10 * time.Second,
			ResponseHeaderTimeout:  15 * time.Second,
			MaxResponseHeaderBytes: 256 << 10,
			MaxIdleConns:           16,
			IdleConnTimeout:        30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
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
	// server bounds the bytes in flight over the Browser.
	server budget

	mu       sync.Mutex
	inflight int
	count    int
	last     time.Time
	refused  []string
	call     budget // the request's (setCall)
}

// setCall gives the page the budget of the call it serves.
func (in *interceptor) setCall(b budget) {
	in.mu.Lock()
	in.call = b
	in.mu.Unlock()
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
	params, done, err := in.answer(tctx, ev.Request)
	if err != nil {
		in.fail(tctx, ev, err)
		return
	}
	defer done()
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

// answer makes the request and returns the response for the page, and
// done, which gives back the bytes it holds once the page has them.
func (in *interceptor) answer(ctx context.Context, req *network.Request) (_ fetch.FulfillRequestParams, done func(), _ error) {
	if in.local != nil {
		f, ok := in.local[req.URL]
		if !ok || req.Method != http.MethodGet {
			return fetch.FulfillRequestParams{}, nil, fmt.Errorf("%w: the render page loads nothing but itself", ErrRefused)
		}
		return fetch.FulfillRequestParams{ResponseCode: 200, ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: f.ctype}}, Body: f.body}, func() {}, nil
	}
	return in.fetch(ctx, req)
}

// fetch makes the request through the policy-checked client.
func (in *interceptor) fetch(ctx context.Context, req *network.Request) (fetch.FulfillRequestParams, func(), error) {
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fetch.FulfillRequestParams{}, nil, fmt.Errorf("%w: only http and https URLs are fetched", ErrRefused)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if err := in.policy.checkLiteral(u.Hostname(), port); err != nil {
		return fetch.FulfillRequestParams{}, nil, err
	}
	var body io.Reader
	if req.HasPostData {
		var b bytes.Buffer
		for _, e := range req.PostDataEntries {
			b.Write(e.Bytes)
		}
		body = &b
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(requestTimeout, cancel)
	defer func() { timer.Stop() }()
	hreq, err := http.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err != nil {
		return fetch.FulfillRequestParams{}, nil, err
	}
	for k, v := range req.Headers {
		if !hopHeaders[strings.ToLower(k)] {
			hreq.Header.Set(k, fmt.Sprint(v))
		}
	}
	resp, err := in.client.Do(hreq)
	if err != nil {
		return fetch.FulfillRequestParams{}, nil, err
	}
	defer resp.Body.Close()
	in.mu.Lock()
	budgets := []budget{in.call, in.server}
	in.mu.Unlock()
	// The most the body may be: no more than a budget can ever give.
	limit := int64(maxResourceBytes)
	for _, bg := range budgets {
		if bg.sem != nil {
			limit = min(limit, bg.size)
		}
	}
	if resp.ContentLength > limit {
		return fetch.FulfillRequestParams{}, nil, fmt.Errorf("response larger than %d bytes", limit)
	}
	want := limit
	if resp.ContentLength >= 0 {
		want = resp.ContentLength
	}
	// Waiting for room is bounded by the page's time, not the request's.
	timer.Stop()
	var held []budget
	give := func(n int64) {
		for _, bg := range held {
			bg.sem.Release(n)
		}
	}
	for _, bg := range budgets {
		if bg.sem == nil {
			continue
		}
		if err := bg.sem.Acquire(ctx, want); err != nil {
			give(want)
			return fetch.FulfillRequestParams{}, nil, fmt.Errorf("waiting for memory to hold the response: %w", err)
		}
		held = append(held, bg)
	}
	timer = time.AfterFunc(requestTimeout, cancel)
	// Room for the whole body at once when its length is known; else it
	// grows as it arrives, not to the budget taken for it.
	var buf bytes.Buffer
	if resp.ContentLength >= 0 {
		buf.Grow(int(want) + 1)
	}
	_, err = io.Copy(&buf, io.LimitReader(resp.Body, want+1))
	b := buf.Bytes()
	if err == nil && int64(len(b)) > want {
		err = fmt.Errorf("response larger than %d bytes", want)
	}
	if err != nil {
		give(want)
		return fetch.FulfillRequestParams{}, nil, err
	}
	give(want - int64(len(b)))
	var once sync.Once
	done := func() { once.Do(func() { give(int64(len(b))) }) }
	var hs []*fetch.HeaderEntry
	for k, vs := range resp.Header {
		if hopHeaders[strings.ToLower(k)] {
			continue
		}
		for _, v := range vs {
			hs = append(hs, &fetch.HeaderEntry{Name: k, Value: v})
		}
	}
	return fetch.FulfillRequestParams{ResponseCode: int64(resp.StatusCode), ResponseHeaders: hs, Body: b}, done, nil
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
