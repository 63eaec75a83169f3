package browser

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
)

// Limits of FetchURLs.
const (
	// MaxURLs is the most URLs one call fetches.
	MaxURLs = 10
	// MaxTextBytes caps the text of one page.
	MaxTextBytes = 64 << 10
	// maxLinks caps the links of one page.
	maxLinks = 100
	// pageTimeout bounds one page: load, scripts' requests, extraction.
	pageTimeout = 30 * time.Second
)

// errArgs marks a caller's mistake in FetchURLs' arguments.
var errArgs = errors.New("invalid arguments")

// Page is the readable content of one fetched URL.
type Page struct {
	URL   string `json:"url"`
	Title string `json:"title,omitempty"`
	// Text is the main text (the page's main or article element when it
	// has one, else its body), at most MaxTextBytes.
	Text      string `json:"text,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Links     []Link `json:"links,omitempty"`
	// Refused lists the requests of the page that were refused or failed,
	// each with the reason.
	Refused []string `json:"refused,omitempty"`
	// Error says why the page could not be read; the other fields are
	// then empty but Refused.
	Error string `json:"error,omitempty"`
}

// Link is one link of a page, its URL absolute.
type Link struct {
	Text string `json:"text"`
	URL  string `json:"url"`
}

// FetchURLs loads each URL in a fresh incognito context and returns its
// readable text, in the order of urls. A page that cannot be read has
// Error set; the error return is for a browser that cannot start or too
// many URLs.
func (b *Browser) FetchURLs(ctx context.Context, urls []string) ([]Page, error) {
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: no URLs given", errArgs)
	}
	if len(urls) > MaxURLs {
		return nil, fmt.Errorf("%w: %d URLs given; at most %d per call", errArgs, len(urls), MaxURLs)
	}
	pages := make([]Page, len(urls))
	errs := make([]error, len(urls))
	call := newBudget(min(maxCallBytes, b.o.MaxInflight))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 3)
	for i, u := range urls {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			pages[i], errs[i] = b.fetch(ctx, u, call)
		})
	}
	wg.Wait()
	return pages, errors.Join(errs...)
}

// extractJS reads a page's title, main text and links.
const extractJS = `(() => {
	const main = document.querySelector('main, article, [role=main]') || document.body;
	const text = main ? main.innerText : '';
	const links = [];
	for (const a of document.querySelectorAll('a[href]')) {
		if (links.length >= %d) break;
		if (!/^https?:/.test(a.href)) continue;
		links.push({text: (a.innerText || '').trim().slice(0, 200), url: a.href.slice(0, 2000)});
	}
	return {title: (document.title || '').slice(0, 500), text: text.slice(0, %d), long: text.length > %d, links};
})()`

type extracted struct {
	Title string `json:"title"`
	Text  string `json:"text"`
	Long  bool   `json:"long"`
	Links []Link `json:"links"`
}

func (b *Browser) fetch(ctx context.Context, raw string, call budget) (Page, error) {
	p := Page{URL: raw}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.Error = "not an http or https URL"
		return p, nil
	}
	ctx, cancel := context.WithTimeout(ctx, pageTimeout)
	defer cancel()
	pg, release, err := b.take(ctx, fetchPage)
	if err != nil {
		return p, err
	}
	defer release()
	tctx, in := pg.ctx, pg.in
	in.setCall(call)
	navErr := chromedp.Do(tctx, chromedp.Navigate(u.String()))
	if navErr == nil {
		in.settle(tctx, 50*time.Millisecond, 2*time.Second)
	}
	p.Refused = in.refusals()
	if err := b.memoryHit(pg); err != nil {
		p.Error = err.Error()
		return p, nil
	}
	if navErr != nil {
		p.Error = "the page did not load"
		if len(p.Refused) > 0 {
			p.Error += ": " + p.Refused[0]
		} else if ctx.Err() != nil {
			p.Error += fmt.Sprintf(" in %s", pageTimeout)
		} else {
			p.Error += ": " + firstLine(navErr.Error())
		}
		return p, nil
	}
	ex, err := chromedp.Run(tctx, chromedp.Evaluate[extracted](fmt.Sprintf(extractJS, maxLinks, MaxTextBytes, MaxTextBytes)))
	// After the text: what the text shows as failed is listed.
	p.Refused = in.refusals()
	if err := b.memoryHit(pg); err != nil {
		p.Error, p.Refused = err.Error(), in.refusals()
		return p, nil
	}
	if err != nil {
		p.Error = "the page's text could not be read: " + firstLine(err.Error())
		return p, nil
	}
	p.Title, p.Links = ex.Title, ex.Links
	p.Text, p.Truncated = ex.Text, ex.Long
	if len(p.Text) > MaxTextBytes { // JS counts UTF-16 units
		p.Text, p.Truncated = truncateUTF8(p.Text, MaxTextBytes), true
	}
	return p, nil
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// client is the Browser's HTTP client for pages, made once.
func (b *Browser) client() *http.Client {
	b.clientOnce.Do(func() { b.httpc = newClient(b.o.Policy, b.o.hosts) })
	return b.httpc
}
