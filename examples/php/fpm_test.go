package php_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/phpfront"
	"github.com/regiond/regiond/internal/testprog"
	"github.com/regiond/regiond/routing"
)

const fpmInstallHint = "install php-fpm and nginx, e.g. `apt-get update && apt-get install -y php-fpm nginx`"

// frontServers returns the php-fpm and nginx binaries, skipping (failing
// in CI) when either is missing.
func frontServers(t *testing.T) (fpm, ngx string) {
	t.Helper()
	php(t)
	fpm, err := phpfront.FindPHPFPM()
	if err != nil {
		testprog.Missing(t, err.Error(), fpmInstallHint)
	}
	ngx, err = phpfront.FindNginx()
	if err != nil {
		testprog.Missing(t, err.Error(), fpmInstallHint)
	}
	return fpm, ngx
}

// rename is one finished replacement of the snapshot.
type rename struct {
	rev int64
	at  time.Time
}

// TestFrontDoorUnderFPM serves example.php from a real php-fpm (pm =
// static, the example pool with its open_basedir enabled) behind a real
// nginx (the example server, on a unix socket) while a writer replaces table.json and table.idx as the
// agent does, every ~2 ms. Every response names the revision it used
// (X-Regiond-Revision), and none is older than the last replacement that
// finished ≥ 5 ms before its request began.
func TestFrontDoorUnderFPM(t *testing.T) {
	fpm, ngx := frontServers(t)
	now := time.Now()
	tab, next := genTables(t, now)
	snapDir := shmTempDir(t)
	snapshot := filepath.Join(snapDir, "table.json")
	write := func(tab *routing.Table) { writeSnapshotAt(t, snapshot, tab) }
	write(tab)
	script, err := filepath.Abs("example.php")
	if err != nil {
		t.Fatal(err)
	}
	s, err := phpfront.Start(context.Background(), phpfront.Config{Dir: t.TempDir(), Script: script, Snapshot: snapshot,
		Children: 2, PHPFPM: fpm, Nginx: ngx, OpenBasedir: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const clients, perClient = 4, 500
	var mu sync.Mutex
	var renames []rename
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for rev := int64(2); ; rev++ {
			select {
			case <-stop:
				return
			default:
			}
			tab = next(tab, rev)
			write(tab)
			mu.Lock()
			renames = append(renames, rename{rev, time.Now()})
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	type answer struct {
		began  time.Time
		rev    int64
		status int
	}
	answers := make([][]answer, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 10 * time.Second,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			countries := []string{"PL", "xx", " de ", "US"}
			for i := range perClient {
				req, _ := http.NewRequest(http.MethodGet, s.URL+"/watch/"+strconv.Itoa(i), nil)
				req.Header.Set("CF-IPCountry", countries[i%len(countries)])
				req.AddCookie(&http.Cookie{Name: "viewer", Value: fmt.Sprintf("v-%d-%d", c, i)})
				began := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					t.Errorf("client %d request %d: %v", c, i, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				rev, err := strconv.ParseInt(resp.Header.Get("X-Regiond-Revision"), 10, 64)
				if err != nil {
					t.Errorf("client %d request %d: status %d, X-Regiond-Revision %q", c, i, resp.StatusCode, resp.Header.Get("X-Regiond-Revision"))
					return
				}
				answers[c] = append(answers[c], answer{began, rev, resp.StatusCode})
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-writerDone
	if t.Failed() {
		t.Fatalf("requests failed\n%s", s.Logs())
	}
	// rename i finished at renames[i].at; its revision is renames[i].rev,
	// increasing.
	total, behind, revs := 0, 0, map[int64]bool{}
	for c, as := range answers {
		for i, a := range as {
			total++
			revs[a.rev] = true
			if a.status != http.StatusFound {
				t.Errorf("client %d request %d: status %d, want 302", c, i, a.status)
			}
			cut := a.began.Add(-5 * time.Millisecond)
			// The last rename finished at or before cut.
			k := sort.Search(len(renames), func(j int) bool { return renames[j].at.After(cut) }) - 1
			if k >= 0 && a.rev < renames[k].rev {
				behind++
				if behind <= 10 {
					t.Errorf("client %d request %d began %v after rename of revision %d finished, answered with revision %d",
						c, i, a.began.Sub(renames[k].at), renames[k].rev, a.rev)
				}
			}
		}
	}
	t.Logf("%d responses from %d revisions while %d renames were made", total, len(revs), len(renames))
	if total != clients*perClient || len(revs) < 10 {
		t.Errorf("%d responses of %d revisions, want %d responses of many revisions", total, len(revs), clients*perClient)
	}
	if behind > 0 {
		t.Errorf("%d of %d responses older than a rename finished ≥ 5 ms before the request", behind, total)
	}
	if b, _ := os.ReadFile(filepath.Join(filepath.Dir(snapshot), "table.idx")); len(b) == 0 {
		t.Error("no index was written")
	}
}
