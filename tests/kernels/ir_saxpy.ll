; saxpy in hand-written LLVM IR: y[i] = a * x[i] + y[i] for i in [0, n).
; No target triple or datalayout: the same text compiles for every architecture.
; The driver's IR flags (-funroll-loops -fvectorize) let LLVM vectorise the loop.

define void @ir_saxpy(float %a, ptr noalias nocapture readonly %x, ptr noalias nocapture %y, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop

loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %py = getelementptr inbounds float, ptr %y, i64 %i
  %vx = load float, ptr %px, align 4
  %vy = load float, ptr %py, align 4
  %ax = fmul float %a, %vx
  %r = fadd float %ax, %vy
  store float %r, ptr %py, align 4
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop

exit:
  ret void
}
