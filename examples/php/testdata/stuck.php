<?php
// A front controller that hangs when asked (?stuck=1), as a child stuck on
// a hung filesystem would: fpm_test.go's TestStuckChildIsReclaimed.
if (($_GET['stuck'] ?? '') === '1') {
    sleep(60);
}
echo "ok\n";
