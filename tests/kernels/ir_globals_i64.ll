; Globals in IR: a constant lookup table (.rodata), an internal mutable counter
; (.data) and a zero-initialised buffer (.bss), plus an internal helper kept out
; of line. Returns an i64 combining the counter and a sum over the table lookups.
; out[i] = table[idx[i] & 7] * (counter after increment); the bss history slot
; read before each write must be zero on a fresh module.

@table = private unnamed_addr constant [8 x i64] [i64 1, i64 10, i64 100, i64 1000, i64 10000, i64 100000, i64 1000000, i64 4294967296]
@counter = internal global i64 6
@history = internal global [16 x i64] zeroinitializer

define internal i64 @lookup(i64 %k) noinline {
  %m = and i64 %k, 7
  %p = getelementptr inbounds [8 x i64], ptr @table, i64 0, i64 %m
  %v = load i64, ptr %p, align 8
  ret i64 %v
}

define i64 @ir_globals_i64(ptr nocapture readonly %idx, ptr nocapture %out, i64 %n) {
entry:
  %c0 = load i64, ptr @counter, align 8
  %c = add i64 %c0, 1
  store i64 %c, ptr @counter, align 8
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %sum = phi i64 [ 0, %entry ], [ %sum.next, %loop ]
  %pi = getelementptr inbounds i64, ptr %idx, i64 %i
  %k = load i64, ptr %pi, align 8
  %t = call i64 @lookup(i64 %k)
  %slot = and i64 %i, 15
  %ph = getelementptr inbounds [16 x i64], ptr @history, i64 0, i64 %slot
  %old = load i64, ptr %ph, align 8
  store i64 %t, ptr %ph, align 8
  %v = mul i64 %t, %c
  %v2 = add i64 %v, %old
  %po = getelementptr inbounds i64, ptr %out, i64 %i
  store i64 %v2, ptr %po, align 8
  %sum.next = add i64 %sum, %t
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop

exit:
  %s = phi i64 [ 0, %entry ], [ %sum.next, %loop ]
  %hi = shl i64 %c, 40
  %r = add i64 %s, %hi
  ret i64 %r
}
