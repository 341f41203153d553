; Dot product returning float, with `reassoc` on the accumulation so the loop
; vectoriser may split it into partial sums: the result's rounding depends on how
; the target vectorises, so the check uses a looser tolerance.

define float @ir_dot_reassoc(ptr nocapture readonly %a, ptr nocapture readonly %b, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi float [ 0.000000e+00, %entry ], [ %acc.next, %loop ]
  %pa = getelementptr inbounds float, ptr %a, i64 %i
  %pb = getelementptr inbounds float, ptr %b, i64 %i
  %va = load float, ptr %pa, align 4
  %vb = load float, ptr %pb, align 4
  %m = fmul reassoc contract float %va, %vb
  %acc.next = fadd reassoc contract float %acc, %m
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop

exit:
  %r = phi float [ 0.000000e+00, %entry ], [ %acc.next, %loop ]
  ret float %r
}
