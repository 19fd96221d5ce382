// y = A x for a CSR matrix through the cuSPARSE generic API.
#include <hip/hip_runtime.h>
#include <hipsparse/hipsparse.h>
#include <cstdio>

#define CHECK_CUSPARSE(call)                                                  \
  do {                                                                        \
    hipsparseStatus_t s_ = (call);                                             \
    if (s_ != HIPSPARSE_STATUS_SUCCESS) {                                      \
      std::printf("cuSPARSE failure %d at line %d\n", (int)s_, __LINE__);     \
      return 1;                                                               \
    }                                                                         \
  } while (0)

int main() {
  // 3x3 identity in CSR form.
  const int rows = 3, cols = 3, nnz = 3;
  int h_rowptr[] = {0, 1, 2, 3}, h_colind[] = {0, 1, 2};
  float h_val[] = {1.f, 1.f, 1.f}, h_x[] = {1.f, 2.f, 3.f};
  int *d_rowptr, *d_colind;
  float *d_val, *d_x, *d_y;
  hipMalloc(&d_rowptr, sizeof(h_rowptr));
  hipMalloc(&d_colind, sizeof(h_colind));
  hipMalloc(&d_val, sizeof(h_val));
  hipMalloc(&d_x, sizeof(h_x));
  hipMalloc(&d_y, sizeof(h_x));
  hipMemcpy(d_rowptr, h_rowptr, sizeof(h_rowptr), hipMemcpyHostToDevice);
  hipMemcpy(d_colind, h_colind, sizeof(h_colind), hipMemcpyHostToDevice);
  hipMemcpy(d_val, h_val, sizeof(h_val), hipMemcpyHostToDevice);
  hipMemcpy(d_x, h_x, sizeof(h_x), hipMemcpyHostToDevice);

  hipsparseHandle_t handle;
  CHECK_CUSPARSE(hipsparseCreate(&handle));
  hipsparseSpMatDescr_t A;
  hipsparseDnVecDescr_t x, y;
  CHECK_CUSPARSE(hipsparseCreateCsr(&A, rows, cols, nnz, d_rowptr, d_colind, d_val, HIPSPARSE_INDEX_32I,
                                   HIPSPARSE_INDEX_32I, HIPSPARSE_INDEX_BASE_ZERO, HIP_R_32F));
  CHECK_CUSPARSE(hipsparseCreateDnVec(&x, cols, d_x, HIP_R_32F));
  CHECK_CUSPARSE(hipsparseCreateDnVec(&y, rows, d_y, HIP_R_32F));
  const float alpha = 1.f, beta = 0.f;
  size_t bytes = 0;
  CHECK_CUSPARSE(hipsparseSpMV_bufferSize(handle, HIPSPARSE_OPERATION_NON_TRANSPOSE, &alpha, A, x, &beta, y,
                                         HIP_R_32F, HIPSPARSE_SPMV_ALG_DEFAULT, &bytes));
  void* buffer = nullptr;
  hipMalloc(&buffer, bytes);
  CHECK_CUSPARSE(hipsparseSpMV(handle, HIPSPARSE_OPERATION_NON_TRANSPOSE, &alpha, A, x, &beta, y, HIP_R_32F,
                              HIPSPARSE_SPMV_ALG_DEFAULT, buffer));
  float h_y[3];
  hipMemcpy(h_y, d_y, sizeof(h_y), hipMemcpyDeviceToHost);
  std::printf("y = %f %f %f\n", h_y[0], h_y[1], h_y[2]);
  hipsparseDestroySpMat(A);
  hipsparseDestroyDnVec(x);
  hipsparseDestroyDnVec(y);
  hipsparseDestroy(handle);
  hipFree(buffer);
  hipFree(d_rowptr);
  hipFree(d_colind);
  hipFree(d_val);
  hipFree(d_x);
  hipFree(d_y);
  return 0;
}
