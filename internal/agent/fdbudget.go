package agent

import "fmt"

// fdBudget fits the API's caps into the file descriptor limit: the
// listeners together keep at most limit-inUse-reserve connections open, so
// the reserve stays for the snapshot writer and the etcd client. It returns
// the connection cap per listener and the blocking-query cap, each lowered
// when it does not fit (a blocking query holds a connection, so it stays
// below the connection cap: plain requests always find one). A limit of 0
// (unknown) lowers nothing.
func fdBudget(maxConns, maxBlocking, reserve, listeners int, limit, inUse uint64) (conns, blocking int, err error) {
	conns, blocking = maxConns, maxBlocking
	if limit == 0 || listeners == 0 {
		return conns, blocking, nil
	}
	free := int64(limit) - int64(inUse) - int64(reserve)
	if per := free / int64(listeners); per < int64(conns) {
		if per < 4 {
			return 0, 0, fmt.Errorf("file descriptor limit %d (%d in use) leaves %d for the API after --fd-reserve %d: raise the limit (ulimit -n, systemd LimitNOFILE=) or lower --fd-reserve",
				limit, inUse, max(free, 0), reserve)
		}
		conns = int(per)
	}
	if blocking >= conns {
		blocking = conns / 2
	}
	return conns, blocking, nil
}
